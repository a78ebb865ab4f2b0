"""Starvation of large jobs on Philly: greedy skipping vs reservation + backfill (and strict order).

One virtual cluster at a time (`load_philly(cluster_id=...)`), on nodes of 8
GPUs sized so the trace's mean GPU demand is 0.7 of the cluster (Philly is bursty:
queues still build up for days). Estimates are
the true durations (`oracle=True`, the best case for backfill) and, as a check
on how much it depends on them, the true durations times a random factor in
[0.5, 2] (`--noisy`). Reports the wait of 8+ GPU jobs (p99, max, mean) and
the cost: mean JCT, mean wait of all jobs, GPU utilization. `reserve@H`
reserves only for a head job that has waited H hours (greedy until then).

    .venv/bin/python -m bench.starvation [--vc 2869ce,7f04ca,6c71a0] [--limit N]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

from trainmaster.controller.loop import Controller
from trainmaster.controller.metrics import percentile
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.trainmaster import Backfill, build
from trainmaster.workloads.base import Workload
from trainmaster.workloads.philly import load_philly

PHILLY = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux" / "philly.csv"
TARGET_LOAD = 0.7


def cluster_for(workload: Workload, load: float = TARGET_LOAD) -> str:
    """Nodes of 8 GPUs so the trace's mean GPU demand is at most TARGET_LOAD of the cluster."""
    jobs = workload.jobs
    span = max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)
    demand = sum(j.truth.total_steps * j.spec.min_gpus for j in jobs) / max(span, 1.0)
    biggest = max(j.spec.min_gpus for j in jobs)
    nodes = max(math.ceil(demand / (8 * load)), math.ceil(biggest / 8))
    return f"{nodes}x8"


def noisy(workload: Workload, seed: int = 0) -> Workload:
    rng = random.Random(seed)
    jobs = tuple(replace(j, spec=replace(j.spec, estimate=(j.spec.estimate or 0.0) * 2 ** rng.uniform(-1, 1)))
                 for j in workload.jobs)
    return Workload(workload.name + "-noisy", jobs)


def run(workload: Workload, cluster: str, mode: str) -> dict[str, float]:
    """`mode`: greedy, reserve, none, or reserve@H (reserve only for a head that has waited H hours)."""
    kind, _, hours = mode.partition("@")
    policy = build(mode, backfill=cast(Backfill, kind), elastic=False, preemption=False, interval=None,
                   reserve_after=float(hours or 0) * 3600)
    engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(restart_delay=0.0))
    ctl = Controller(engine, policy)
    t0 = time.perf_counter()
    ctl.run()
    wall = time.perf_counter() - t0
    s = ctl.summary()
    busy = busy_utilization(ctl)
    big = [r.first_start - r.submit_time for r in ctl.jobs.values()
           if r.spec.min_gpus >= 8 and r.first_start is not None]
    return {"big_jobs": len(big), "big_p99_h": percentile(big, 99) / 3600, "big_max_h": max(big, default=0) / 3600,
            "big_mean_h": sum(big) / max(len(big), 1) / 3600, "mean_jct_h": s.mean_jct / 3600,
            "mean_wait_h": s.mean_queueing / 3600, "util": s.gpu_utilization, "busy_util": busy, "finished": s.finished,
            "jobs": s.jobs, "wall_s": wall}


def busy_utilization(ctl: Controller) -> float:
    """GPU utilization while at least one job waits: what holding room for a reservation costs."""
    spans = sorted((r.submit_time, r.first_start) for r in ctl.jobs.values()
                   if r.first_start is not None and r.first_start > r.submit_time)
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    time_ = sum(b - a for a, b in merged)
    used = sum(ctl.usage.gpu_seconds(a, b) for a, b in merged)
    return used / (ctl.usage.capacity * time_) if time_ > 0 else math.nan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vc", default="2869ce,7f04ca,6c71a0")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--modes", default="greedy,reserve,none")
    ap.add_argument("--noisy", action="store_true", help="also with estimates off by up to 2x")
    ap.add_argument("--load", type=float, default=TARGET_LOAD, help="mean GPU demand / cluster GPUs")
    args = ap.parse_args()
    if not PHILLY.is_file():
        raise SystemExit(f"needs {PHILLY} (../shared/data)")
    print("| VC | jobs (8+ GPU) | cluster | estimates | policy | 8+ GPU wait p99 h | max h | mean h "
          "| all: mean JCT h | mean wait h | GPU util | util while jobs wait | sim wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for vc in args.vc.split(","):
        workload = load_philly(PHILLY, cluster_id=vc, limit=args.limit, oracle=True)
        cluster = cluster_for(workload, args.load)
        variants = [("true", workload)] + ([("noisy x0.5-2", noisy(workload))] if args.noisy else [])
        for label, wl in variants:
            for mode in args.modes.split(","):
                m = run(wl, cluster, mode)
                print(f"| {vc} | {m['jobs']:.0f} ({m['big_jobs']:.0f}) | {cluster} | {label} | {mode} "
                      f"| {m['big_p99_h']:.1f} | {m['big_max_h']:.1f} | {m['big_mean_h']:.2f} | {m['mean_jct_h']:.2f} "
                      f"| {m['mean_wait_h']:.2f} | {m['util']:.3f} | {m['busy_util']:.3f} | {m['wall_s']:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
