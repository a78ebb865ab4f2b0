"""Scheduler decision time: one cycle (`policy.decide(snapshot)`) with 1,000 pending jobs (`--pending`) on 1,000 nodes.

Two snapshots, both on 1,000 nodes x 8 GPUs:

- `idle`: an empty cluster and 1,000 pending jobs of Gavel's size mix
  (70% 1 GPU, 10% 2, 15% 4, 5% 8): every job gets placed;
- `busy`: 2,000 running 4-GPU jobs fill the cluster (half of them past
  Tiresias' queue threshold, with oracle estimates), plus the same 1,000
  pending jobs: preemptive policies evict, the others find no room.

For each registered preset: the first decision on a fresh policy (it also
admits the 1,000 new jobs, i.e. checks each can ever fit) and the steady
state (the same policy deciding again), median of `--repeat` runs, in ms.

    .venv/bin/python -m bench.decision_time [--repeat 5] [--policy fifo,drf] [--clock cpu] [--pending 10000]

`--clock cpu` times with `time.process_time` (less hurt by a shared machine than wall time).
To compare with older code, run this file against the other tree's source:
`PYTHONPATH=OLD/src python -m bench.decision_time --clock cpu`, alternating with this tree.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from types import MappingProxyType

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.registry import available, make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.tiresias import THRESHOLD
from trainmaster.workloads.synthetic import GPU_MIX

NODES = 1000
GPUS_PER_NODE = 8
PENDING = 1000
NOW = 1_000_000.0


def _pending(rng: random.Random, pending: int = PENDING) -> list[JobView]:
    sizes, weights = zip(*GPU_MIX, strict=True)
    out = []
    for i in range(pending):
        gpus = rng.choices(sizes, weights)[0]
        spec = simple_job(f"p{i}", gpus, estimate=rng.uniform(600, 36_000), queue=f"q{i % 4}")
        out.append(JobView(id=spec.name, spec=spec, state=JobState.PENDING, submit_time=NOW - pending + i))
    return out


def _running(rng: random.Random) -> list[JobView]:
    out = []
    for i in range(NODES * GPUS_PER_NODE // 4):
        node = f"n{i // 2}"
        spec = simple_job(f"r{i}", 4, estimate=rng.uniform(600, 36_000), queue=f"q{i % 4}")
        attained = THRESHOLD * (2.0 if i % 2 else 0.5)
        out.append(JobView(id=spec.name, spec=spec, state=JobState.RUNNING, submit_time=rng.uniform(0, NOW / 2),
                           allocation=Allocation.of(Placement(Role.WORKER, node) for _ in range(4)),
                           first_start=NOW / 2, running_since=NOW / 2, attained=attained, runtime=attained / 4))
    return out


def snapshot(busy: bool, seed: int = 0, pending: int = PENDING) -> Snapshot:
    """The bench's snapshot, with the figures the controller keeps incrementally (free total, held, pending ids)."""
    rng = random.Random(seed)
    cluster = parse_shorthand(f"{NODES}x{GPUS_PER_NODE}")
    jobs = _pending(rng, pending) + (_running(rng) if busy else [])
    free = {n.name: n.capacity for n in cluster.nodes}
    for job in jobs:
        for name, res in job.allocation.per_node(job.spec).items():
            free[name] = free[name] - res
    return Snapshot(now=NOW, cluster=cluster, jobs=MappingProxyType({j.id: j for j in jobs}),
                    free=MappingProxyType(free), free_total=sum(free.values(), start=Resources()),
                    held=MappingProxyType({j.id: j.allocation for j in jobs if j.active}),
                    pending_ids=tuple(j.id for j in jobs if j.pending))


def time_policy(name: str, snap: Snapshot, repeat: int,
                clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, int]:
    """(first decision ms, steady-state ms, jobs the plan runs), medians over `repeat` fresh policies."""
    first, steady = [], []
    placed = 0
    for _ in range(repeat):
        policy = make_policy(name)
        t0 = clock()
        plan = policy.decide(snap)
        t1 = clock()
        policy.decide(snap)
        t2 = clock()
        first.append(1000 * (t1 - t0))
        steady.append(1000 * (t2 - t1))
        placed = len(plan.allocations)
    return statistics.median(first), statistics.median(steady), placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--policy", default=",".join(available()))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--pending", type=int, default=PENDING, help="pending jobs in each snapshot (issue 15: 10000)")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    names = [p.strip() for p in args.policy.split(",")]
    snaps = {"idle": snapshot(busy=False, pending=args.pending), "busy": snapshot(busy=True, pending=args.pending)}
    print(f"one decision, {args.pending} pending jobs on {NODES} nodes x {GPUS_PER_NODE} GPUs; "
          f"median of {args.repeat}; ms ({args.clock} time)")
    print("| policy | idle: first | idle: steady | idle: x fifo | busy: first | busy: steady | busy: x fifo "
          "| jobs run idle / busy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows: dict[str, list[tuple[float, float, int]] | str] = {}
    for name in names:
        try:
            rows[name] = [time_policy(name, snap, args.repeat, clock) for snap in snaps.values()]
        except Exception as exc:  # a preset that needs more than a bare snapshot (fitted models, queues)
            rows[name] = f"error: {type(exc).__name__}: {exc}"
    base = rows.get("fifo")
    for name, row in rows.items():
        if isinstance(row, str):
            print(f"| {name} | {row} |")
            continue
        cells = []
        for k, (first, steady, _) in enumerate(row):
            ratio = f"{steady / base[k][1]:.1f}" if isinstance(base, list) and base[k][1] > 0 else "-"
            cells += [f"{first:,.0f}", f"{steady:,.0f}", ratio]
        print(f"| {name} | " + " | ".join(cells) + f" | {row[0][2]:,} / {row[1][2]:,} |", flush=True)

if __name__ == "__main__":
    main()
