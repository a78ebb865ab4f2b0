"""Decision time of one `optimus` cycle with fitted models: 1,000 jobs on 1,000 nodes, 10,000 on 16,000.

Nodes have 8 GPUs. Jobs follow Gavel's size mix (70% 1 GPU, 10% 2, 15% 4, 5% 8),
elastic from 1 to 2x that, each with a fitted all-reduce speed model (random
coefficients) and a remaining step count. Two snapshots per scale: every job
pending (the first decision) and every job running where that decision put it
(steady state: the greedy and placement redo everything from an empty cluster,
as optimus does each cycle). fifo on the same snapshots is the in-process
baseline at 1,000 jobs (these machines are noisy: compare ratios). Optimus reports about 5 s
for 100,000 tasks on 16,000 nodes (EuroSys'18, section 6.4).

    .venv/bin/python -m bench.optimus_decision [--repeat 3] [--big | --only-big] [--clock cpu]

Against older code: `PYTHONPATH=OLD/src python -m bench.optimus_decision --only-big --clock cpu`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from types import MappingProxyType

from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.models.book import JobModel
from trainmaster.models.speed import Form, SpeedFit
from trainmaster.policies.fifo import make as fifo
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import JobView, Plan, Policy, Snapshot
from trainmaster.workloads.synthetic import GPU_MIX


def snapshots(jobs: int, nodes: int, seed: int = 0) -> tuple[Snapshot, Snapshot, int]:
    """(all pending, all running where optimus first put them, tasks in the plan)."""
    rng = random.Random(seed)
    cluster = parse_shorthand(f"{nodes}x8")
    sizes, weights = zip(*GPU_MIX, strict=True)
    views: dict[str, JobView] = {}
    models: dict[str, JobModel] = {}
    for i in range(jobs):
        gpus = rng.choices(sizes, weights)[0]
        spec = simple_job(f"j{i}", gpus, min_gpus=1, max_gpus=2 * gpus, job_type="bench")
        views[spec.name] = JobView(id=spec.name, spec=spec, state=JobState.PENDING, submit_time=float(i))
        theta = (0.01, 2e-3 * rng.uniform(0.5, 2), 0.02, 0.004, 0.08 * rng.uniform(0.5, 2), 0.01)
        models[spec.name] = JobModel(spec.name, Form.ALLREDUCE, 256.0, SpeedFit(Form.ALLREDUCE, theta), "bench",
                                     0.0, rng.uniform(1e3, 1e6), 5)
    free = {n.name: n.capacity for n in cluster.nodes}
    pending = Snapshot(now=0.0, cluster=cluster, jobs=MappingProxyType(views), free=MappingProxyType(dict(free)),
                       models=MappingProxyType(models))
    plan = Optimus().decide(pending)
    running: dict[str, JobView] = {}
    for jid, view in views.items():
        alloc = plan.allocations.get(jid)
        if alloc:
            for node, res in alloc.per_node(view.spec).items():
                free[node] = free[node] - res
            running[jid] = JobView(id=jid, spec=view.spec, state=JobState.RUNNING, submit_time=view.submit_time,
                                   allocation=alloc, first_start=0.0, running_since=0.0)
        else:
            running[jid] = view
    steady = Snapshot(now=600.0, cluster=cluster, jobs=MappingProxyType(running), free=MappingProxyType(free),
                      models=MappingProxyType(models))
    return pending, steady, sum(len(a) for a in plan.allocations.values())


def timed(policy: Policy, snap: Snapshot, repeat: int,
          clock: Callable[[], float] = time.perf_counter) -> tuple[float, Plan]:
    times = []
    plan = Plan(allocations={})
    for _ in range(repeat):
        t0 = clock()
        plan = policy.decide(snap)
        times.append(1000 * (clock() - t0))
    return statistics.median(times), plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big", action="store_true", help="also 10,000 jobs on 16,000 nodes")
    parser.add_argument("--only-big", action="store_true", help="only 10,000 jobs on 16,000 nodes")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: time.process_time, less hurt by a shared machine")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    scales = ([] if args.only_big else [(1000, 1000)]) + ([(10_000, 16_000)] if args.big or args.only_big else [])
    print("| jobs | nodes x 8 GPUs | snapshot | tasks planned | optimus ms | fifo ms | optimus / fifo |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for jobs, nodes in scales:
        pending, steady, _ = snapshots(jobs, nodes)
        for label, snap in (("all pending", pending), ("steady state", steady)):
            policy = Optimus()
            policy.decide(snap)  # admission checks are cached per job after the first cycle
            t_opt, plan = timed(policy, snap, args.repeat, clock)
            tasks = sum(len(a) for a in plan.allocations.values())
            if jobs <= 1000:  # fifo's workspace scans every node per job: minutes at the big scale
                base = fifo()
                base.decide(snap)
                t_fifo, _ = timed(base, snap, args.repeat, clock)
                cells = f"{t_fifo:,.0f} | {t_opt / t_fifo:.2f}"
            else:
                cells = "- | -"
            print(f"| {jobs:,} | {nodes:,} | {label} | {tasks:,} | {t_opt:,.0f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
