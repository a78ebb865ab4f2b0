"""Scheduler decision time: one cycle (`policy.decide(snapshot)`) with 1,000 pending jobs (`--pending`) on 1,000 nodes.

Two snapshots, both on 1,000 nodes x 8 GPUs:

- `idle`: an empty cluster and 1,000 pending jobs of Gavel's size mix
  (70% 1 GPU, 10% 2, 15% 4, 5% 8): every job gets placed;
- `busy`: 2,000 running 4-GPU jobs fill the cluster (half of them past
  Tiresias' queue threshold, with oracle estimates), plus the same 1,000
  pending jobs: preemptive policies evict, the others find no room.

For each registered preset: the first decision on a fresh policy (it also
admits the 1,000 new jobs, i.e. checks each can ever fit) and the steady
state (the same policy deciding again), median (and min) of `--repeat` runs, in ms.

Why the collector is handled (`--gc`): the snapshots hold ~10^5 tracked objects (views, specs,
allocations) built before any timing. A decision that happens to trigger a full collection pays a
pass over all of them (tens of ms at 10,000 pending), and whether it does depends on how many
objects earlier code left behind -- readings moved across processes with the same call counts
(sim-perf.md, Sessions 9 and 14). `collect` (the default) runs `gc.collect()` before each timed
decision, so each starts from the same collector state and pays only for what it allocates itself;
`freeze` also moves everything built before the timings (the snapshots) to the permanent generation
(`gc.freeze()`), as a long-lived controller's state would be after its own full passes; `as-is` is
the old protocol. Several repeats: medians and minimums both (the minimum is the least disturbed by
the other work on a shared machine).

    .venv/bin/python -m bench.decision_time [--repeat 5] [--policy fifo,drf] [--clock cpu] [--pending 10000] \
        [--gc collect|freeze|as-is] [--only busy] [--switch trainmaster.policies.las.LasPreempt.kept_keys]

`--switch MODULE.CLASS.ATTR`: an old/new comparison in one process (across processes the collector and the
shared machine move readings more than most changes): each preset's steady decision with a fast path's class
switch on and off, alternating, the plans checked equal.

`--clock cpu` times with `time.process_time` (less hurt by a shared machine than wall time).
To compare with older code, run this file against the other tree's source:
`PYTHONPATH=OLD/src python -m bench.decision_time --clock cpu`, alternating with this tree.
"""

from __future__ import annotations

import argparse
import gc
import importlib
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
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
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


def _timed(decide: Callable[[Snapshot], Plan], snap: Snapshot, clock: Callable[[], float],
           collect: bool) -> tuple[float, Plan]:
    """ms of one decision and its plan; `collect`: after a `gc.collect()` (module doc)."""
    if collect:
        gc.collect()
    t0 = clock()
    plan = decide(snap)
    return 1000 * (clock() - t0), plan


def time_policy(name: str, snap: Snapshot, repeat: int, clock: Callable[[], float] = time.perf_counter,
                collect: bool = True) -> tuple[list[float], list[float], int]:
    """(first decision ms per run, steady-state ms per run, jobs the plan runs) over `repeat` fresh policies."""
    first, steady = [], []
    placed = 0
    for _ in range(repeat):
        policy = make_policy(name)
        ms, plan = _timed(policy.decide, snap, clock, collect)
        first.append(ms)
        steady.append(_timed(policy.decide, snap, clock, collect)[0])
        placed = len(plan.allocations)
    return first, steady, placed


def compare_switch(name: str, snap: Snapshot, switch: str, repeat: int, clock: Callable[[], float],
                   collect: bool) -> dict[bool, list[float]]:
    """Steady-decision ms with the class switch `switch` (module.Class.attr) on and off, alternating which
    goes first; the plans of both must be equal (a fast path plans as its reference)."""
    module, owner, attr = switch.rsplit(".", 2)
    cls = getattr(importlib.import_module(module), owner)
    was = getattr(cls, attr)
    runs: dict[bool, list[float]] = {True: [], False: []}
    plans: dict[bool, Plan] = {}
    try:
        for k in range(repeat):
            for on in (True, False) if k % 2 == 0 else (False, True):
                setattr(cls, attr, on)
                policy = make_policy(name)
                policy.decide(snap)
                ms, plans[on] = _timed(policy.decide, snap, clock, collect)
                runs[on].append(ms)
            if plans[True] != plans[False]:
                raise AssertionError(f"{name}: {switch} on and off planned differently")
    finally:
        setattr(cls, attr, was)
    return runs


def _cell(runs: list[float]) -> str:
    """median (min) of `runs`."""
    return f"{statistics.median(runs):,.0f} ({min(runs):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--policy", default=",".join(available()))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--pending", type=int, default=PENDING, help="pending jobs in each snapshot (issue 15: 10000)")
    parser.add_argument("--gc", choices=("collect", "freeze", "as-is"), default="collect",
                        help="collector handling (module doc)")
    parser.add_argument("--only", choices=("idle", "busy"), default=None, help="one snapshot only")
    parser.add_argument("--switch", default=None, help="module.Class.attr: steady on vs off in this process")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    names = [p.strip() for p in args.policy.split(",")]
    kinds = [args.only] if args.only else ["idle", "busy"]
    snaps = {kind: snapshot(busy=kind == "busy", pending=args.pending) for kind in kinds}
    if args.gc == "freeze":
        gc.collect()
        gc.freeze()
    collect = args.gc != "as-is"
    if args.switch:
        print(f"steady decision ms ({args.clock} time; gc {args.gc}), {args.switch} on / off, median (min) of "
              f"{args.repeat}, alternating; plans equal")
        for name in names:
            for kind, snap in snaps.items():
                runs = compare_switch(name, snap, args.switch, args.repeat, clock, collect)
                ratio = statistics.median(runs[True]) / statistics.median(runs[False])
                print(f"| {name} | {kind} | {_cell(runs[True])} | {_cell(runs[False])} | {ratio:.2f} |", flush=True)
        return
    print(f"one decision, {args.pending} pending jobs on {NODES} nodes x {GPUS_PER_NODE} GPUs; "
          f"median (min) of {args.repeat}; ms ({args.clock} time; gc {args.gc})")
    head = " | ".join(f"{kind}: first | {kind}: steady | {kind}: x fifo" for kind in kinds)
    print(f"| policy | {head} | jobs run {' / '.join(kinds)} |")
    print("| --- |" + " ---: | ---: | ---: |" * len(kinds) + " ---: |")
    rows: dict[str, list[tuple[list[float], list[float], int]] | str] = {}
    for name in names:
        try:
            rows[name] = [time_policy(name, snap, args.repeat, clock, collect) for snap in snaps.values()]
        except Exception as exc:  # a preset that needs more than a bare snapshot (fitted models, queues)
            rows[name] = f"error: {type(exc).__name__}: {exc}"
    base = rows.get("fifo")
    for name, row in rows.items():
        if isinstance(row, str):
            print(f"| {name} | {row} |")
            continue
        cells = []
        for k, (first, steady, _) in enumerate(row):
            base_steady = statistics.median(base[k][1]) if isinstance(base, list) else 0.0
            ratio = f"{statistics.median(steady) / base_steady:.1f}" if base_steady > 0 else "-"
            cells += [_cell(first), _cell(steady), ratio]
        print(f"| {name} | " + " | ".join(cells) + f" | {' / '.join(f'{r[2]:,}' for r in row)} |", flush=True)


if __name__ == "__main__":
    main()
