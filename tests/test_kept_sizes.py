"""Tiresias' and srtf's sizes kept per job view, and rank preemption's holders summed from the first claimant
on, plan exactly as `current_or_min` per job and every holder summed at set-up.

`cycle.KeptSizes` re-sizes only the jobs whose view changed (the controller rebuilds a view only when its
record changes); `LowerRank.lazy_sums` reads what the holders hold only for those ranked after the first
claimant whose room is asked. A contended workload (a long line, preemption, migration) replays with both
and with neither; every plan, the order of its allocations and its waits (in order) must be equal.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import cycle, srtf, tiresias
from trainmaster.policies.cycle import Cycle, KeptSizes, Sizes
from trainmaster.policies.preemption import LowerRank
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload


def replay(make: Callable[[], Cycle], kept: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Plan], int, int]:
    """Every plan; the jobs `current_or_min` sized; the holders left out of rank preemption's sums."""
    policy = make()
    assert isinstance(policy.size, KeptSizes)  # (the preset's own)
    counts = [0, 0]
    sized, summed = cycle.current_or_min, LowerRank._sum

    def counted_size(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
        counts[0] += len(jobs)
        return sized(snap, jobs, ws)

    def counted_sum(self: LowerRank, start: int) -> None:
        counts[1] += start
        summed(self, start)

    if not kept:
        policy.size = counted_size
    with monkeypatch.context() as patch:
        patch.setattr(cycle, "current_or_min", counted_size)
        patch.setattr(LowerRank, "_sum", counted_sum)
        patch.setattr(LowerRank, "lazy_sums", kept)
        recorder = Recorder(policy)
        workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans, counts[0], counts[1]


@pytest.mark.parametrize("make", [tiresias.make, srtf.make], ids=["tiresias", "srtf"])
def test_kept_sizes_and_lazy_sums_plan_alike(make: Callable[[], Cycle],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_sized, fast_left_out = replay(make, True, monkeypatch)
    slow, slow_sized, slow_left_out = replay(make, False, monkeypatch)
    same_plans(fast, slow, least=100)  # (`Plan` equality covers `wake_after`)
    assert fast_sized < slow_sized / 3  # most jobs' sizes were kept
    assert slow_left_out == 0 < fast_left_out  # holders ranked ahead of the first claimant were not summed


def test_kept_sizes_follow_a_new_view_of_the_same_job() -> None:
    """A job's next view (resized, then preempted) is sized afresh, not from what its id held before; an
    unchanged view keeps its earlier dict. The replays above cannot tell identity from id: there every size
    is the job's minimum, so this asks directly."""
    cluster = parse_shorthand("2x4")
    spec = simple_job("j", 1, min_gpus=1, max_gpus=4)
    one = Allocation.of([Placement(Role.WORKER, "n0")])
    three = Allocation.of([Placement(Role.WORKER, "n0"), Placement(Role.WORKER, "n0"), Placement(Role.WORKER, "n1")])
    views = [JobView(id="j", spec=spec, state=JobState.RUNNING, submit_time=0, allocation=one),
             JobView(id="j", spec=spec, state=JobState.RUNNING, submit_time=0, allocation=three),
             JobView(id="j", spec=spec, state=JobState.PENDING, submit_time=0)]
    kept = KeptSizes()
    seen = []
    for view in views:
        snap = Snapshot(now=0, cluster=cluster, jobs={"j": view}, free={n.name: n.capacity for n in cluster.nodes})
        ws = Workspace(snap)
        first = kept(snap, [view], ws)
        assert first == cycle.current_or_min(snap, [view], ws)
        again = kept(snap, [view], ws)
        assert again == first and again["j"] is first["j"]  # unchanged view: the kept dict itself
        seen.append(first["j"][Role.WORKER])
    assert seen == [1, 3, 1]
