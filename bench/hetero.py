"""Heterogeneity: throughput-aware placement vs type-blind on Gavel's physical-cluster traces.

Gavel (OSDI'20) ran its physical-cluster traces on 48 GPUs: 8 V100, 16 P100
and 24 K80 (section 7.1); here 4-GPU servers, listed K80 first so that the
type-blind placement (tightest fit, first in cluster order on ties) has no
accidental lean to the fast type (`--order v100-first` shows the other lean).
The simulator's ground truth is Gavel's measured throughput per job type, GPU
type and scale (workloads/gavel.py); the scheduler never reads it. The
throughput-aware run scores GPU types by the job's speed: its learned per-type
speed (models, presets that fit models) or the generic prior (median Gavel
ratio per type, models/speed.py) for presets without models.

    .venv/bin/python -m bench.hetero [--policy fifo,tiresias,trainmaster] [--traces all|NAME,...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from trainmaster.cli.simulate import simulate_one
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.registry import make_policy
from trainmaster.policies.scoring import TIGHTEST, Scoring
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.gavel import load_gavel_trace

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CLUSTERS = {"k80-first": "6x4:k80+4x4:p100+2x4:v100", "v100-first": "2x4:v100+4x4:p100+6x4:k80"}
TRACES = ("small_test", "medium_test", "artifact_evaluation", "max_min_fairness", "minimize_makespan")


def with_scoring(policy: Policy, scoring: Scoring | None) -> Policy:
    """The preset with its placement scoring replaced (None: as built, i.e. throughput-aware)."""
    if scoring is None:
        return policy
    if isinstance(policy, Cycle):
        policy.scoring = scoring
        return policy
    if isinstance(policy, Optimus):  # a preset that wraps a Cycle
        policy.cycle.scoring = scoring
        return policy
    raise SystemExit(f"{policy.name}: cannot set its scoring")


def run(trace: Path, cluster: Cluster, policy: str, scoring: Scoring | None) -> tuple[float, float, int]:
    """(mean JCT, makespan, jobs finished) of one trace under one preset and scoring."""
    workload = load_gavel_trace(trace, DATA / "gavel" / "simulation_throughputs.json")
    result = simulate_one(workload, cluster, with_scoring(make_policy(policy), scoring),
                          SimConfig(report_interval=300.0))
    s = result.summary
    return s.mean_jct, s.makespan, s.finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="fifo,tiresias,trainmaster")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--order", default="k80-first", choices=sorted(CLUSTERS))
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args()
    cluster = parse_shorthand(CLUSTERS[args.order])
    folder = DATA / "gavel" / "traces" / "physical_cluster"
    lines = [f"cluster {CLUSTERS[args.order]} ({cluster.total.gpu} GPUs)", "",
             "| trace | jobs | policy | mean JCT blind | aware | ratio | makespan blind | aware | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios: dict[str, list[tuple[float, float]]] = {}
    for name in args.traces.split(","):
        trace = folder / f"{name.strip()}.trace"
        jobs = sum(1 for line in trace.read_text().splitlines() if line.strip())
        for policy in args.policy.split(","):
            blind = run(trace, cluster, policy, TIGHTEST)
            aware = run(trace, cluster, policy, None)
            assert blind[2] == aware[2] == jobs, f"{policy} left jobs unfinished on {name}"
            jr, mr = aware[0] / blind[0], aware[1] / blind[1]
            ratios.setdefault(policy, []).append((jr, mr))
            lines.append(f"| {name} | {jobs} | {policy} | {blind[0]:,.0f} s | {aware[0]:,.0f} s | {jr:.3f} | "
                         f"{blind[1]:,.0f} s | {aware[1]:,.0f} s | {mr:.3f} |")
            print(lines[-1], flush=True)
    lines.append("")
    for policy, rs in ratios.items():
        gj = statistics.geometric_mean(r[0] for r in rs)
        gm = statistics.geometric_mean(r[1] for r in rs)
        lines.append(f"{policy}: aware/blind geometric mean over traces: mean JCT {gj:.3f}, makespan {gm:.3f}")
        print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
