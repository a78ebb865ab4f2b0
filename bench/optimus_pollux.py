"""Mean JCT of fifo, drf, tiresias and optimus on Pollux `workloads/workload-1..8`, 16 nodes x 4 GPUs.

Jobs are elastic from 1 to 2x their requested replicas (`max_factor=2`), global
batch fixed. fifo, drf and tiresias size jobs at their minimum, which for
elastic jobs is 1 GPU; they are also run on the same workloads at the
requested size (`max_factor=1`), their stronger setting. optimus learns each
job's speed from its reports (every 300 s, 3% noise on reported speed, 2% on
loss); `optimus-time` is the paper's objective (seconds saved), `optimus` the
default (completion rate gained; see policies/optimus.py). Restart cost 30 s.

    .venv/bin/python -m bench.optimus_pollux [--workloads 1-8] [--policies fifo,drf,tiresias,optimus,optimus-time]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.pollux import load_pollux

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux"
POLLUX_OPTIMUS_ORACLE = 5682.0  # Pollux (OSDI'21) Table: Optimus+Oracle on these workloads, seconds


def policy(name: str) -> Policy:
    return Optimus(objective="time") if name == "optimus-time" else make_policy(name)


def run(name: str, workload: int, max_factor: float) -> tuple[float, int, float]:
    """(mean JCT s, restarts, GPU utilization) of one policy on one workload."""
    wl = load_pollux(DATA / "workloads" / f"workload-{workload}.csv", DATA / "profiles", max_factor=max_factor)
    config = SimConfig(report_interval=300.0, speed_noise=0.03, loss_noise=0.02, seed=workload)
    controller = Controller(SimEngine(parse_shorthand("16x4"), wl, config), policy(name))
    controller.run()
    s = controller.summary()
    assert s.finished == len(wl), f"{name} on workload-{workload}: {s.finished}/{len(wl)} finished"
    return s.mean_jct, s.restarts, s.gpu_utilization


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="1-8")
    parser.add_argument("--policies", default="fifo,drf,tiresias,optimus,optimus-time")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"needs ../shared/data/pollux (not found at {DATA})")
    lo, _, hi = args.workloads.partition("-")
    workloads = list(range(int(lo), int(hi or lo) + 1))
    rows: list[tuple[str, list[float], list[int], list[float], float]] = []
    for name in [p.strip() for p in args.policies.split(",") if p.strip()]:
        factors = (2.0,) if name.startswith("optimus") else (2.0, 1.0)
        for mf in factors:
            t0 = time.perf_counter()
            jcts, restarts, utils = [], [], []
            for w in workloads:
                jct, rs, util = run(name, w, mf)
                jcts.append(jct)
                restarts.append(rs)
                utils.append(util)
            label = f"{name} (max_factor={mf:g})"
            rows.append((label, jcts, restarts, utils, time.perf_counter() - t0))
            print(f"{label}: mean {statistics.mean(jcts):,.0f} s  {[round(j) for j in jcts]}", flush=True)
    print()
    print("| policy | " + " | ".join(f"wl-{w}" for w in workloads) + " | mean of means (s) | restarts/wl | GPU util "
          "| wall s |")
    print("| --- | " + " | ".join("---:" for _ in workloads) + " | ---: | ---: | ---: | ---: |")
    for label, jcts, restarts, utils, wall in rows:
        print(f"| {label} | " + " | ".join(f"{j:,.0f}" for j in jcts) + f" | **{statistics.mean(jcts):,.0f}** | "
              f"{statistics.mean(restarts):,.0f} | {statistics.mean(utils):.2f} | {wall:,.0f} |")
    print(f"\nPollux's published Optimus+Oracle figure: {POLLUX_OPTIMUS_ORACLE:,.0f} s")


if __name__ == "__main__":
    main()
