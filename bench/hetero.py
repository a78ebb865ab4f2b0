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

    .venv/bin/python -m bench.hetero [--policy fifo,tiresias,trainmaster] [--traces NAME,...]
        [--order k80-first|v100-first] [--learned minimize_makespan] [--out FILE]
    .venv/bin/python -m bench.hetero --decision     # decision time, plain vs mixed cluster (CPU ms)
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from types import MappingProxyType

from trainmaster.cli.simulate import simulate_one
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.speed import relative_speeds
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.registry import make_policy
from trainmaster.policies.scoring import TIGHTEST, Scoring
from trainmaster.policies.snapshot import JobView, Policy, Snapshot
from trainmaster.workloads.gavel import load_gavel_trace, load_throughputs

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


def learned_ratios(trace: Path, cluster: Cluster, policy: str = "optimus") -> list[tuple[str, str, float, float]]:
    """(job type, GPU type, learned speed / K80 speed, Gavel's at scale 1) per job type the run saw on 2+ types."""
    workload = load_gavel_trace(trace, DATA / "gavel" / "simulation_throughputs.json")
    truth = load_throughputs(DATA / "gavel" / "simulation_throughputs.json")
    engine = SimEngine(cluster, workload, SimConfig(report_interval=300.0))
    controller = Controller(engine, make_policy(policy))
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    controller.run()
    out = []
    for job_type, rates in sorted(learning.book.type_rates.items()):
        if len(rates.types) < 2 or "k80" not in rates.types:
            continue
        speeds = relative_speeds(rates)
        for kind in sorted(rates.types - {"k80"}):
            real = truth[kind].get((job_type, 1), 0.0) / max(truth["k80"].get((job_type, 1), 0.0), 1e-12)
            out.append((job_type, kind, speeds[kind] / speeds["k80"], real))
    return out


def decision_ms(shorthand: str, policy: str, jobs: int = 1000, repeat: int = 3) -> float:
    """Median CPU ms of one steady-state decision placing `jobs` pending jobs (Gavel's size mix) on an idle cluster."""
    cluster = parse_shorthand(shorthand)
    rng = random.Random(1)
    views = {}
    for i in range(jobs):
        spec = simple_job(f"j{i}", rng.choice((1, 1, 1, 1, 1, 1, 1, 2, 4, 4, 8)))
        views[spec.name] = JobView(id=spec.name, spec=spec, state=JobState.PENDING, submit_time=float(i))
    snap = Snapshot(now=0.0, cluster=cluster, jobs=MappingProxyType(views),
                    free=MappingProxyType({n.name: n.capacity for n in cluster.nodes}))
    made = make_policy(policy)
    made.decide(snap)  # the first decision also admits every job
    times = []
    for _ in range(repeat):
        start = time.process_time()
        made.decide(snap)
        times.append(1000 * (time.process_time() - start))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="fifo,tiresias,trainmaster")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--order", default="k80-first", choices=sorted(CLUSTERS))
    parser.add_argument("--learned", default="", help="also show the per-type speeds optimus learned on this trace")
    parser.add_argument("--decision", action="store_true", help="time one decision on a plain vs a mixed cluster")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args()
    if args.decision:
        plain, mixed = "1000x8", "400x8:k80+300x8:p100+300x8:v100"
        for policy in args.policy.split(","):
            a, b = decision_ms(plain, policy), decision_ms(mixed, policy)
            print(f"{policy}: one decision, 1,000 jobs on {plain} {a:.0f} ms, on {mixed} {b:.0f} ms (x{b / a:.1f})")
        return
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
    if args.learned:
        lines += ["", f"Learned speed per GPU type ({args.learned}, optimus): job type, type, learned x K80, "
                      "Gavel's x K80 at scale 1", "", "| job type | GPU | learned | Gavel | error |",
                  "| --- | --- | --- | --- | --- |"]
        errors = []
        for job_type, kind, got, real in learned_ratios(folder / f"{args.learned}.trace", cluster):
            errors.append(abs(got - real) / real)
            lines.append(f"| {job_type} | {kind} | {got:.2f} | {real:.2f} | {100 * errors[-1]:.0f}% |")
        if errors:
            lines += ["", f"median error {100 * statistics.median(errors):.0f}% over {len(errors)} (type, GPU) pairs"]
        print("\n".join(lines[-len(errors) - 6:]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
