"""Where trainmaster's mean JCT goes, per application: queueing, run time, and run time over the bound.

For each job of Pollux workloads under `--fidelity pollux` (16x4, the preset's own settings, as
`bench.presets` runs it): its queueing (first start - submit), its run time (finish - first start),
its mean GPUs while running (GPU-seconds / run time), and the bound of `bench.pollux_bound` (alone,
best replicas x batch per epoch, replicas capped as the setting caps them: 2x the request in elastic)
and its run time alone at the request. Grouped by application, so the jobs that lose most to their
bound show which sizing or batch decision to look at; `--trace JOB` prints that job's GPU steps.

    .venv/bin/python -m bench.job_gap [--load 0.5] [--workloads 1-4] [--setting elastic]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from collections import defaultdict

from bench.pollux_bound import DATA, best_alone
from bench.presets import CLUSTER, SETTINGS, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--workloads", default="1-4")
    parser.add_argument("--setting", default="elastic", choices=sorted(SETTINGS))
    parser.add_argument("--preset", default="trainmaster")
    parser.add_argument("--trace", default="", help="print the GPU steps and reasons of this job id (e.g. yolov3-12)")
    args = parser.parse_args()
    lo, _, hi = args.workloads.partition("-")
    folder = DATA / ("workloads" if args.load == 1.0 else f"workloads-{args.load:.1f}")
    rows: dict[str, list[tuple[float, float, float, float, float]]] = defaultdict(list)
    resizes: dict[str, list[int]] = defaultdict(list)
    for n in range(int(lo), int(hi or lo) + 1):
        with open(folder / f"workload-{n}.csv", newline="") as f:
            meta = {r["name"]: r for r in csv.DictReader(f)}
        wl = workload(args.load, n, SETTINGS[args.setting], False, "pollux")
        engine = SimEngine(parse_shorthand(CLUSTER), wl, config_for(args.preset, sim_config("pollux")))
        controller = Controller(engine, make_policy(args.preset))
        steps: list[tuple[float, int, str]] = []

        def listen(what: str, record: JobRecord, steps: list[tuple[float, int, str]] = steps,
                   engine: SimEngine = engine) -> None:
            if record.id == args.trace and (not steps or steps[-1][1] != record.gpus_held):
                steps.append((engine.clock.now(), record.gpus_held, record.why))

        controller.listeners.append(listen)
        controller.run()
        for t, gpus, why in steps:
            print(f"  {args.trace} t={t:,.0f} gpus={gpus} why={why}")
        for record in controller.jobs.values():
            r = meta[record.id]
            assert record.first_start is not None and record.finish_time is not None, record.id
            run = record.finish_time - record.first_start
            requested = PeerTruth.of(load_profile(DATA / "profiles" / r["application"]),
                                     int(r["batch_size"])).runtime(int(r["num_replicas"]))
            factor = SETTINGS[args.setting]
            cap = None if math.isinf(factor) else int(int(r["num_replicas"]) * factor)
            resizes[r["application"]].append(record.resizes + record.preemptions)
            rows[r["application"]].append((record.first_start - record.submit_time, run,
                                           record.attained(record.finish_time) / run,
                                           best_alone(r["application"], cap)[0], requested))
    print(f"load {args.load:g}, workloads {args.workloads}, {args.setting}, {args.preset}; mean s per job")
    print("| application | jobs | queueing | run | GPUs while running | bound (best alone, setting's cap) "
          "| alone at request | run / bound | share of total excess | resizes + preemptions |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = sum(q + run - b for v in rows.values() for q, run, _, b, _ in v)
    every = [x for v in rows.values() for x in v]
    for app, v in sorted(rows.items(), key=lambda kv: -sum(q + r - b for q, r, _, b, _ in kv[1])):
        q, run, g, b, a = (statistics.mean(x[i] for x in v) for i in range(5))
        excess = sum(x[0] + x[1] - x[3] for x in v)
        print(f"| {app} | {len(v)} | {q:,.0f} | {run:,.0f} | {g:.1f} | {b:,.0f} | {a:,.0f} | {run / b:.2f} "
              f"| {excess / total:.0%} | {statistics.mean(resizes[app]):.1f} |")
    q, run, g, b, a = (statistics.mean(x[i] for x in every) for i in range(5))
    moves = statistics.mean(x for v in resizes.values() for x in v)
    print(f"| all | {len(every)} | {q:,.0f} | {run:,.0f} | {g:.1f} | {b:,.0f} | {a:,.0f} | {run / b:.2f} | 100% "
          f"| {moves:.1f} |")


if __name__ == "__main__":
    main()
