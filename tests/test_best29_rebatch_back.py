"""In-place batch switches (`AdaptiveCycle._switches`): any gain moves a job on; `REBATCH_GAIN` guards the way back.

Issue 11, best29: the 5% threshold on every switch held jobs at worse batches; none at all let them flap between
two close batches. Only a switch back to the batch a job last left needs `REBATCH_GAIN`.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

import trainmaster.policies.trainmaster as tm
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import BatchRange, Role, simple_job
from trainmaster.core.states import JobState
from trainmaster.policies.snapshot import JobView, Plan, Snapshot


def _held() -> Allocation:
    return Allocation.of(Placement(Role.WORKER, "n0") for _ in range(4))


def _snapshot(state: JobState = JobState.RUNNING) -> Snapshot:
    spec = simple_job("a", 4, adaptive_batch=BatchRange(32, 1024, 256))
    views = {"a": JobView("a", spec, state, 0.0, allocation=_held())}
    return Snapshot(0.0, parse_shorthand("4x4"), MappingProxyType(views), {},
                    held=MappingProxyType({jid: v.allocation for jid, v in views.items()}))


def test_a_switch_on_takes_any_gain_and_a_switch_back_needs_rebatch_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    gains = {(256, 512): 1.01, (512, 256): 1.03, (512, 128): 1.001, (128, 1024): 0.99, (128, 512): 1.06}
    monkeypatch.setattr(tm, "switch_gain", lambda snap, jid, alloc, old, new: gains[old, new])
    cycle = tm.make()
    assert isinstance(cycle, tm.AdaptiveCycle)
    snap, plan = _snapshot(), Plan(allocations={"a": _held()})
    steps = [(256, {}), (512, {"a": 512}), (256, {}), (128, {"a": 128}), (1024, {}), (512, {"a": 512})]
    for batch, switched in steps:  # 1.01 on; 1.03 back to 256 (left) refused; 1.001 on; < 1 refused; 1.06 back
        assert cycle._switches(snap, plan, {"a": batch}) == switched, batch
    assert cycle.issued["a"] == 512 and cycle.left["a"] == 128
    assert tm.REBATCH_GAIN > 1.03


def test_a_job_not_running_where_it_stands_never_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tm, "switch_gain", lambda snap, jid, alloc, old, new: 2.0)
    cycle = tm.make()
    assert isinstance(cycle, tm.AdaptiveCycle)
    starting = _snapshot(JobState.STARTING)
    for batch in (256, 512):
        assert cycle._switches(starting, Plan(allocations={"a": _held()}), {"a": batch}) == {}
    assert cycle.issued["a"] == 256 and "a" not in cycle.left  # it starts at the batch issued at its start
