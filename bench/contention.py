"""Where trainmaster's JCT goes under contention: queueing, preempted waits, start/restart delays, slow running.

Replays Pollux workloads as `bench.job_gap` does (`--fidelity pollux`, 16x4, the preset's settings; the
same replay as `bench.oracle_goodput`'s mode `fitted`) and follows every job's GPUs over time. Per
application, mean s per job: queueing (submit to first start), waits after a preemption (held no GPU
between starts), start/restart delays (allocations x the engine's delay), the rest of its run, the
bound alone (`bench.pollux_bound.best_alone`, the setting's cap) and the excess over it; GPU-weighted
mean size. Cluster-wide: mean GPUs held, and GPU-seconds idle while some job waits for GPUs
(fragmentation and sizes that leave room unused) over the replay.

    .venv/bin/python -m bench.contention [--load 1] [--workloads 1-2] [--setting elastic]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from collections import defaultdict

from bench.pollux_bound import DATA, best_alone
from bench.presets import CLUSTER, SETTINGS, parse_range, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.registry import make_policy

COLUMNS = ("jct", "queue", "preempted", "delays", "run rest", "bound", "excess", "allocs", "shrinks", "GPUs",
           "delay GPU-s")


def replay(load: float, index: int, setting: str, preset: str) -> tuple[dict[str, list[tuple[float, int]]],
                                                                         dict[str, JobRecord], float]:
    """Every job's (time, GPUs held) steps, its record, and the engine's restart delay."""
    wl = workload(load, index, SETTINGS[setting], False, "pollux")
    config = config_for(preset, sim_config("pollux"))
    engine = SimEngine(parse_shorthand(CLUSTER), wl, config)
    controller = Controller(engine, make_policy(preset))
    steps: dict[str, list[tuple[float, int]]] = defaultdict(list)

    def listen(what: str, record: JobRecord) -> None:
        got = steps[record.id]
        if not got or got[-1][1] != record.gpus_held:
            got.append((engine.clock.now(), record.gpus_held))

    controller.listeners.append(listen)
    controller.run()
    return steps, dict(controller.jobs), config.restart_delay


def split(record: JobRecord, steps: list[tuple[float, int]], delay: float) -> dict[str, float]:
    """One job's JCT split: queueing, waits after preemption, delays (allocations x delay), the rest of its run."""
    assert record.first_start is not None and record.finish_time is not None, record.id
    held = [(t, g) for t, g in steps if record.first_start <= t <= record.finish_time]
    preempted, gpu_s, allocs, shrinks, wasted, last = 0.0, 0.0, 0, 0, 0.0, (record.first_start, 0)
    for t, g in [*held, (record.finish_time, 0)]:
        if last[1] == 0:
            preempted += t - last[0]
        gpu_s += (t - last[0]) * last[1]
        if last[1]:  # (the GPUs a start or restart holds through its delay)
            wasted += min(delay, t - last[0]) * last[1]
        if g and g != last[1]:
            allocs += 1
            shrinks += 0 < g < last[1]
        last = (t, g)
    queue = record.first_start - record.submit_time
    jct = record.finish_time - record.submit_time
    run = record.finish_time - record.first_start - preempted
    delays = min(allocs * delay, run)
    return {"jct": jct, "queue": queue, "preempted": preempted, "delays": delays, "run rest": run - delays,
            "allocs": allocs, "shrinks": shrinks, "gpu_s": gpu_s, "run": run, "delay GPU-s": wasted}


def idle_while_waiting(records: dict[str, JobRecord], steps: dict[str, list[tuple[float, int]]],
                       total: int) -> tuple[float, float, float]:
    """(GPU-s idle while some job waited without GPUs, GPU-s held, makespan) over the replay."""
    events: list[tuple[float, str, int]] = []
    for jid, rec in records.items():
        assert rec.finish_time is not None
        events.append((rec.submit_time, jid, -1))
        events.extend((t, jid, g) for t, g in steps[jid] if t < rec.finish_time)  # (a stop may be told later)
        events.append((rec.finish_time, jid, -2))
    events.sort(key=lambda e: e[0])
    held: dict[str, int] = {}
    waiting: set[str] = set()
    idle = used = 0.0
    last = events[0][0]
    for t, jid, g in events:
        busy = sum(held.values())
        used += (t - last) * busy
        if waiting:
            idle += (t - last) * (total - busy)
        last = t
        if g == -1:
            waiting.add(jid)
        elif g == -2:
            waiting.discard(jid)
            held.pop(jid, None)
        else:
            held[jid] = g
            (waiting.discard if g else waiting.add)(jid)
    return idle, used, last - events[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--workloads", default="1-2")
    parser.add_argument("--setting", default="elastic", choices=sorted(SETTINGS))
    parser.add_argument("--preset", default="trainmaster")
    args = parser.parse_args()
    folder = DATA / ("workloads" if args.load == 1.0 else f"workloads-{args.load:.1f}")
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    total_gpus = sum(n.capacity.gpu for n in parse_shorthand(CLUSTER).nodes)
    for n in parse_range(args.workloads):
        with open(folder / f"workload-{n}.csv", newline="") as f:
            meta = {r["name"]: r for r in csv.DictReader(f)}
        steps, records, delay = replay(args.load, n, args.setting, args.preset)
        idle, used, span = idle_while_waiting(records, steps, total_gpus)
        waste = sum(split(rec, steps[jid], delay)["delay GPU-s"] for jid, rec in records.items())
        print(f"workload {n}: GPU-s held through (re)start delays {waste:,.0f} ({waste / used:.1%} of those held)")
        print(f"workload {n}: mean GPUs held {used / span:.1f} of {total_gpus}, GPU-s idle while a job waited "
              f"{idle:,.0f} ({idle / (span * total_gpus):.1%} of the replay's GPU-s), makespan {span:,.0f} s")
        factor = SETTINGS[args.setting]
        for jid, rec in records.items():
            r = meta[jid]
            cap = None if math.isinf(factor) else int(int(r["num_replicas"]) * factor)
            row = split(rec, steps[jid], delay)
            row["bound"] = best_alone(r["application"], cap)[0]
            row["excess"] = row["jct"] - row["bound"]
            row["GPUs"] = row["gpu_s"] / max(row["run"], 1e-9)
            rows[r["application"]].append(row)
    every = [x for v in rows.values() for x in v]
    excess = sum(x["excess"] for x in every)
    print(f"load {args.load:g}, workloads {args.workloads}, {args.setting}, {args.preset}; mean s per job")
    print("| application | jobs | " + " | ".join(COLUMNS) + " | share of excess |")
    print("| --- | ---: |" + " ---: |" * (len(COLUMNS) + 1))
    groups = sorted(rows.items(), key=lambda kv: -sum(x["excess"] for x in kv[1]))
    for app, v in [*groups, ("all", every)]:
        cells = " | ".join(f"{statistics.mean(x[c] for x in v):,.{1 if c in ('allocs', 'shrinks', 'GPUs') else 0}f}"
                           for c in COLUMNS)
        print(f"| {app} | {len(v)} | {cells} | {sum(x['excess'] for x in v) / excess:.0%} |")


if __name__ == "__main__":
    main()
