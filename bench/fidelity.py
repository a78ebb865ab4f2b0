"""Fidelity against Pollux's simulator: average JCT on Pollux workloads 1..8 on 16 nodes x 4 GPUs.

Pollux (OSDI'21, Table 3 / section 5.3) reports 4,038 s as the mean of the
eight workloads' average JCTs under Tiresias in its simulator, which used the
same profiles. We replay the same workloads with our `tiresias` preset (and
`fifo`, `drf` beside it) and print each workload's average JCT.

    .venv/bin/python -m bench.fidelity [--data ../shared/data] [--policy tiresias,fifo,drf]
        [--restart-delay 30] [--starvation 10|off]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from trainmaster.cli.simulate import simulate_one
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.policies import tiresias
from trainmaster.policies.registry import ORACLE, make_policy
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.pollux import load_pollux

POLLUX_TIRESIAS_MEAN_JCT = 4038.0  # seconds, Pollux's simulator, workloads 1-8 on 16x4
BAND = 0.25
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def average_jcts(policy: str, data: Path, restart_delay: float = 30.0,
                 build: Callable[[], Policy] | None = None) -> list[float]:
    """Average JCT of each of the eight workloads under the preset `policy` (or what `build` makes)."""
    pollux = data / "pollux"
    cluster = parse_shorthand("16x4")
    out = []
    for n in range(1, 9):
        workload = load_pollux(pollux / "workloads" / f"workload-{n}.csv", pollux / "profiles",
                               oracle=policy in ORACLE)
        chosen = policy if build is None else build()
        result = simulate_one(workload, cluster, chosen, SimConfig(restart_delay=restart_delay))
        assert result.summary.finished == len(workload), f"{policy} left jobs unfinished on workload-{n}"
        out.append(result.summary.mean_jct)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--policy", default="tiresias,fifo,drf")
    parser.add_argument("--restart-delay", type=float, default=30.0)
    parser.add_argument("--starvation", default=None, help="override tiresias' starvation factor (or 'off')")
    args = parser.parse_args()
    factor = None if args.starvation in (None, "off") else float(args.starvation)
    variant = None if args.starvation is None else (lambda: tiresias.make(starvation=factor))
    names = [p.strip() for p in args.policy.split(",")]
    for name in names:
        make_policy(name)
    rows = {}
    for name in names:
        started = time.perf_counter()
        rows[name] = average_jcts(name, args.data, args.restart_delay, variant if name == "tiresias" else None)
        print(f"# {name}: {time.perf_counter() - started:.1f} s wall for 8 workloads", flush=True)
    print(f"\naverage JCT (s) per Pollux workload on 16x4, restart delay {args.restart_delay:g} s")
    print("| workload | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    for n in range(8):
        print(f"| workload-{n + 1} | " + " | ".join(f"{rows[p][n]:,.0f}" for p in names) + " |")
    print("| **mean** | " + " | ".join(f"**{statistics.mean(rows[p]):,.0f}**" for p in names) + " |")
    if "tiresias" in rows:
        mean = statistics.mean(rows["tiresias"])
        ratio = mean / POLLUX_TIRESIAS_MEAN_JCT
        verdict = "within" if abs(ratio - 1) <= BAND else "OUTSIDE"
        print(f"\ntiresias mean {mean:,.0f} s vs Pollux's simulator {POLLUX_TIRESIAS_MEAN_JCT:,.0f} s: "
              f"ratio {ratio:.3f}, {verdict} the ±{BAND:.0%} band")


if __name__ == "__main__":
    main()
