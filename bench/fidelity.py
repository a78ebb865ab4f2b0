"""Fidelity against Pollux's simulator: average JCT on Pollux workloads 1..8 on 16 nodes x 4 GPUs.

Pollux (OSDI'21, Table 3 / section 5.3) reports 4,038 s as the mean of the
eight workloads' average JCTs under Tiresias in its simulator, which used the
same profiles. We replay the same workloads with our `tiresias` preset (and
`fifo`, `drf` beside it) and print each workload's average JCT.

`--fidelity pollux` (the default here) models what that simulator models: 30 s
on every start, the first included; 60 s scheduling rounds; job length and
speed from its progress/gain model (`workloads/pollux_peer.py`).
`--fidelity default` is `trainmaster simulate`'s default mode (ratio 0.866).

    .venv/bin/python -m bench.fidelity [--data ../shared/data] [--policy tiresias,fifo,drf]
        [--fidelity pollux|default] [--start-delay S] [--restart-delay S] [--round S] [--starvation 10|off]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from trainmaster.cli.simulate import sim_config, simulate_one
from trainmaster.cli.simulate_cmd import FIDELITY
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.policies import tiresias
from trainmaster.policies.registry import ORACLE, make_policy
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.pollux import load_pollux

POLLUX_TIRESIAS_MEAN_JCT = 4038.0  # seconds, Pollux's simulator, workloads 1-8 on 16x4
BAND = 0.05
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def average_jcts(policy: str, data: Path, config: SimConfig | None = None,
                 build: Callable[[], Policy] | None = None, fidelity: str = "default") -> list[float]:
    """Average JCT of each of the eight workloads under the preset `policy` (or what `build` makes)."""
    pollux = data / "pollux"
    cluster = parse_shorthand("16x4")
    config = config or sim_config(fidelity)
    out = []
    for n in range(1, 9):
        workload = load_pollux(pollux / "workloads" / f"workload-{n}.csv", pollux / "profiles",
                               oracle=policy in ORACLE, fidelity=fidelity)
        chosen = policy if build is None else build()
        result = simulate_one(workload, cluster, chosen, config)
        assert result.summary.finished == len(workload), f"{policy} left jobs unfinished on workload-{n}"
        out.append(result.summary.mean_jct)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--policy", default="tiresias,fifo,drf")
    parser.add_argument("--fidelity", choices=sorted(FIDELITY), default="pollux")
    parser.add_argument("--start-delay", type=float, default=None, help="default: the mode's")
    parser.add_argument("--restart-delay", type=float, default=None, help="default: the mode's")
    parser.add_argument("--round", type=float, default=None, help="seconds between rounds (0: event-driven)")
    parser.add_argument("--starvation", default=None, help="override tiresias' starvation factor (or 'off')")
    args = parser.parse_args()
    factor = None if args.starvation in (None, "off") else float(args.starvation)
    variant = None if args.starvation is None else (lambda: tiresias.make(starvation=factor))
    names = [p.strip() for p in args.policy.split(",")]
    for name in names:
        make_policy(name)
    config = sim_config(args.fidelity, start_delay=args.start_delay, restart_delay=args.restart_delay,
                        round=args.round)
    rows = {}
    for name in names:
        started = time.perf_counter()
        rows[name] = average_jcts(name, args.data, config, variant if name == "tiresias" else None, args.fidelity)
        print(f"# {name}: {time.perf_counter() - started:.1f} s wall for 8 workloads", flush=True)
    print(f"\naverage JCT (s) per Pollux workload on 16x4, fidelity {args.fidelity}: start delay "
          f"{config.start_delay:g} s, restart delay {config.restart_delay:g} s, "
          f"rounds {'none (event-driven)' if config.round is None else f'{config.round:g} s'}")
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
