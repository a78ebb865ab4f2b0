"""Session 19 (rep21): trainmaster's busy decision -- no doomed as-is try, the LAS room kept, live kinds per workspace.

Each change is exact, tested here against the code it replaced: `_evict_for` tries no placement as is for a
claimant whose need exceeds the free total (`VictimRule.lean_misfit`; under queue definitions with a
quota-aware rule it still does); `SameClassLowerRank.room` hands back its last answer for the same class and
depth; the pinned plan digests (`test_recorded_plans.py`, `test_trainmaster_busy_reads.py`) check the decisions
as a whole. (`Workspace.live_kinds`: `test_rep19_busy.py`.)
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, job, pending, running, snapshot
from tests.test_rep20_busy import _claimant_case  # (the one claimant case)

from trainmaster.core.job import Role
from trainmaster.core.resources import Resources, resources_of
from trainmaster.policies import preemption
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace


def _as_is_tries(monkeypatch: pytest.MonkeyPatch, snap: Snapshot) -> tuple[Any, list[tuple[bool, bool]]]:
    """A trainmaster decision, with each placement `_evict_for` tries before its trial opens (as is): whether
    the need it was handed fit the free total then, and whether it placed."""
    tries: list[tuple[bool, bool]] = []
    real = preemption._place

    def spied(rule: preemption.VictimRule, ws: Workspace, job: JobView, want: Any, need: Resources | None = None
              ) -> bool:
        fits = need is None or need.fits_in(ws.total_free)
        placed = real(rule, ws, job, want, need)
        if not ws._trials:
            tries.append((fits, placed))
        return placed

    monkeypatch.setattr(preemption, "_place", spied)
    plan = make_policy("trainmaster").decide(snap)
    monkeypatch.undo()
    return plan, tries


def test_no_as_is_try_beyond_the_free_total_and_the_same_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy decision (1,500 pending): with `lean_misfit` no claimant is tried as is with a need beyond the
    free total; without it such tries happen, every one fails, and the plan is the same."""
    snap: Snapshot = bench_snapshot(busy=True, pending=1500)
    lean, tries = _as_is_tries(monkeypatch, snap)
    assert tries and all(fits for fits, _ in tries)
    monkeypatch.setattr(preemption.VictimRule, "lean_misfit", False)
    reference, old_tries = _as_is_tries(monkeypatch, snap)
    doomed = [placed for fits, placed in old_tries if not fits]
    assert doomed and not any(doomed)
    assert len(old_tries) == len(tries) + len(doomed)
    assert lean == reference


@pytest.mark.parametrize("queued", [False, True])
def test_the_as_is_try_is_kept_under_queue_definitions(monkeypatch: pytest.MonkeyPatch, queued: bool) -> None:
    """Without queue definitions the claimant is not placed as is (its need is beyond the free total); with them
    (the trial opens first: the placement may ask the book) it is, as before; it starts by evicting either way."""
    calls: list[int] = []
    real = preemption._place

    def spied(*args: Any) -> bool:
        calls.append(len(args[1]._trials))
        return real(*args)

    monkeypatch.setattr(preemption, "_place", spied)
    ws, rule, p = _claimant_case(queued, fits=False)
    evicted = preemption._evict_for(rule, ws, p, None, {})
    assert evicted is not None and [v.id for v, _, _ in evicted] == ["g"] and "p" in ws.allocations
    assert calls == ([1, 1] if queued else [1])


def test_a_doomed_claimant_still_marks_its_gang_a_misfit() -> None:
    """The as-is try skipped, the gang is still recorded as not fitting with the free total it met."""
    ws, rule, p = _claimant_case(False, fits=False)
    misfits: dict[Any, Resources] = {}
    free = ws.total_free
    assert preemption._evict_for(rule, ws, p, "key", misfits) is not None
    assert misfits == {"key": free} and misfits["key"] is free


def _reference_room(rule: SameClassLowerRank, claimant: JobView) -> Resources:
    """`room` as it was: the sum read (or added up) at every call."""
    found = rule._class(claimant)
    if found is None or found[1] >= len(rule.ids[found[0]]):
        return Resources()
    key, i = found
    summed = rule.summed[key]
    back = len(rule.held[key]) - i
    if back < len(summed):
        return resources_of(*summed[back])
    return rule._suffix(key, i)


def test_room_kept_answers_as_computed_across_classes() -> None:
    """`room` against the reference on random lines of two priorities (claimants of either class in turn, some
    with nobody after them), holders evicted off the ends between claimants; the kept answer is served."""
    rng = random.Random(21)
    served = 0
    for _ in range(60):
        views, claimants = [], []
        for k in range(rng.randint(3, 14)):
            spec = job(f"h{k}", rng.randint(1, 2), priority=rng.randint(0, 1))
            views.append(running(f"h{k}", spec.roles[Role.WORKER].min, on=f"n{k % 8}", spec=spec))
        for k in range(rng.randint(2, 12)):
            claimants.append(pending(f"p{k}", 1, spec=job(f"p{k}", 1, priority=rng.randint(0, 1))))
        snap = snapshot(cluster(8, 4), *views, *claimants)
        order = [*claimants, *views]
        rng.shuffle(order)
        ws = Workspace(snap)
        ws.rank.update({v.id: i for i, v in enumerate(order)})
        line = sorted(claimants, key=lambda c: ws.rank[c.id])
        rule = SameClassLowerRank(ws, line)
        for c in line:
            first = rule.room(c)
            assert first == _reference_room(rule, c)
            again = rule.room(c)
            assert again is first  # (the same class and depth: the kept object)
            served += 1
            found = rule._class(c)
            if found is not None and rng.random() < 0.4 and len(rule.ids[found[0]]) > found[1]:
                victim = snap.jobs[rule.ids[found[0]][-1]]  # (the last holder of its class: evicted for good)
                ws.release(victim)
                rule.settled(c, [victim], True)
    assert served > 200
