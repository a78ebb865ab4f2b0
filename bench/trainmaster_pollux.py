"""Mean JCT of `trainmaster` beside tiresias and optimus on Pollux workloads 1-8, 16 nodes x 4 GPUs.

Both settings of issue 11: fixed size (jobs as submitted, `--max-factor 1`) and
elastic (1 to 2x the requested GPUs). Every policy runs under the same engine
settings, those `trainmaster simulate` uses when a model-driven preset is
compared (30 s restart delay, reports every 300 s, seed 1), so one
workload's figure does not depend on which other policies ran.

    .venv/bin/python -m bench.trainmaster_pollux [--data ../shared/data] [--workloads 1-8]
        [--policies tiresias,optimus,trainmaster] [--factors 1,2] [--load 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from trainmaster.cli.simulate import simulate_one
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.workloads.pollux import load_pollux

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOADS = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}


def mean_jct(policy: str, workload: Path, profiles: Path, max_factor: float) -> tuple[float, int, float]:
    """(mean JCT s, restarts, GPU utilization) of one preset on one workload."""
    wl = load_pollux(workload, profiles, max_factor=max_factor)
    config = SimConfig(restart_delay=30.0, report_interval=300.0, seed=1)
    result = simulate_one(wl, parse_shorthand("16x4"), policy, config)
    s = result.summary
    assert s.finished == len(wl), f"{policy} on {workload.name}: {s.finished}/{len(wl)} finished"
    return s.mean_jct, s.restarts, s.gpu_utilization


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--workloads", default="1-8")
    parser.add_argument("--policies", default="tiresias,optimus,trainmaster")
    parser.add_argument("--factors", default="1,2")
    parser.add_argument("--load", type=float, default=1.0, choices=sorted(LOADS))
    args = parser.parse_args()
    pollux = args.data / "pollux"
    if not pollux.is_dir():
        sys.exit(f"needs the Pollux traces (not found at {pollux}); pass --data")
    lo, _, hi = args.workloads.partition("-")
    numbers = list(range(int(lo), int(hi or lo) + 1))
    folder = pollux / LOADS[args.load]
    print("| policy | max factor | " + " | ".join(f"wl-{n}" for n in numbers) + " | mean (s) | restarts/wl "
          "| GPU util | wall s |")
    print("| --- | ---: |" + " ---: |" * len(numbers) + " ---: | ---: | ---: | ---: |", flush=True)
    for name in [p.strip() for p in args.policies.split(",") if p.strip()]:
        for mf in (float(f) for f in args.factors.split(",")):
            t0 = time.perf_counter()
            rows = [mean_jct(name, folder / f"workload-{n}.csv", pollux / "profiles", mf) for n in numbers]
            jcts = [r[0] for r in rows]
            print(f"| {name} | {mf:g} | " + " | ".join(f"{j:,.0f}" for j in jcts)
                  + f" | **{statistics.mean(jcts):,.0f}** | {statistics.mean(r[1] for r in rows):,.0f} "
                  f"| {statistics.mean(r[2] for r in rows):.2f} | {time.perf_counter() - t0:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
