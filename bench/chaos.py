"""Chaos over several seeds: jobs submitted / ended exactly once / lost / run twice (BENCHMARKS.md).

python -m bench.chaos --seeds 1,2,3,4,5

Each seed runs the driver of tests/chaos.py: a real daemon with ~10 real jobs, killed with -9 three
times, five task processes SIGKILLed and one job cancelled, then every invariant checked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the driver lives beside its test

from chaos import run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    args = parser.parse_args()
    print("| seed | submitted | ended exactly once | lost | run twice | daemon kills | task kills | cancelled "
          "| violations | wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = 0
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"tm-chaos-{seed}-") as tmp:
            r = run_chaos(seed, Path(tmp))
        failed += bool(r.violations)
        print(f"| {seed} | {r.submitted} | {r.ended_once} | {r.lost} | {r.ran_twice} | {r.daemon_kills} "
              f"| {r.task_kills} | {r.cancelled} | {len(r.violations)} | {r.wall_s:.0f} |", flush=True)
        for v in r.violations:
            print(f"  - {v}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
