"""Session 21's journaled passes plan exactly as their references.

`KeptSizes.followed` (tiresias', srtf's `KeptSizes(journal=True)`): every live job's size kept as one mapping
from one snapshot to the next, moved on by the snapshot's journal (`PendingIds.changed`, `joined`) instead of
three passes over every live job. `TiresiasOrder.follow`: the order's new or changed views looked for among the
journaled jobs alone, its kept views moved on by them instead of a copy of every live job's. A contended
workload (a long line, preemption, migration) replays with both switches on and both off: every plan equal,
its allocations and waits in the same order; at every size call the sizes are `current_or_min`'s, key for key,
and at every order call the kept views are the snapshot's.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.replay_helpers import on_and_off, preset_plans

from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.policies import cycle
from trainmaster.policies.cycle import KeptSizes, Sizes, current_or_min
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.tiresias import TiresiasOrder
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption


def _sizes_as_reference(sizes: Sizes, self: KeptSizes, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> bool:
    """Whether the sizes handed out are `current_or_min`'s for `jobs`, key for key (and not the kept mapping)."""
    assert sizes == current_or_min(snap, jobs, ws) and sizes.keys() == {job.id for job in jobs}
    assert sizes is not self.out
    return self.out is not None and self.stamp is not None


def _views_as_snapshot(order: list[JobView], self: TiresiasOrder, snap: Snapshot) -> bool:
    """After a full visit, the kept views are the snapshot's, job for job; whether the journal served it."""
    if not self.partial:
        assert all(self.views[jid] is job for jid, job in snap.jobs.items())
    return True


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_journaled_passes_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiresias: both; srtf: the sizes; trainmaster: both (its LAS rule's `TiresiasOrder`; its sizes, without
    services, `OnlyWithServices`' `KeptSizes(journal=True)` since rep27: read by id alone)."""
    spies: dict[str, Any] = {"sizes": (KeptSizes, "__call__", _sizes_as_reference),
                             "follow": (KeptSizes, "_follow"), "order": (TiresiasOrder, "__call__", _views_as_snapshot),
                             "journal": (TiresiasOrder, "_journal")}
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (KeptSizes, "followed"),
                            (TiresiasOrder, "follow"), spies=spies, least=100)
    served = [out is not None for out in fast.calls["follow"]]
    assert sum(served) > 0.8 * len(fast.calls["sizes"]) > 50  # the journal served most size calls
    assert not slow.calls["follow"]
    if preset != "srtf":
        journaled = [found is not None for found in fast.calls["journal"]]
        assert sum(journaled) > 0.8 * len(journaled) > 50  # ... and most full visits of the order
        assert all(found is None for found in slow.calls["journal"]) or not slow.calls["journal"]


def _snap(views: dict[str, JobView], version: int, changed: frozenset[str], joined: frozenset[str] = frozenset()
          ) -> Snapshot:
    cluster = parse_shorthand("2x4")
    held = {jid: v.allocation for jid, v in views.items() if v.active}
    pending = PendingIds([jid for jid, v in views.items() if v.pending], "origin", version, joined, frozenset(),
                         changed)
    return Snapshot(now=0, cluster=cluster, jobs=views, free={n.name: n.capacity for n in cluster.nodes},
                    held=held, pending_ids=pending)


def test_followed_sizes_drop_a_job_gone_unjournaled_and_start_again_off_the_next_version() -> None:
    """A job that left is not journaled (only views rebuilt and jobs new to the line are): the count tells,
    and its size goes; a snapshot other than the next one takes the reference passes. The replays above
    cannot tell a kept size from a fresh one: there every size is the job's minimum."""
    a, b, c = (JobView(id=j, spec=simple_job(j, 1), state=JobState.PENDING, submit_time=0) for j in "abc")
    kept = KeptSizes(journal=True)
    follow = kept._follow
    calls: list[Sizes | None] = []

    def counted(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes | None:
        calls.append(follow(snap, jobs, ws))
        return calls[-1]

    kept._follow = counted  # type: ignore[method-assign]
    steps = [({"a": a, "b": b}, 1, frozenset()), ({"a": a, "b": b, "c": c}, 2, frozenset({"c"})),
             ({"a": a, "c": c}, 3, frozenset()), ({"c": c}, 5, frozenset())]
    for views, version, joined in steps:
        snap = _snap(views, version, frozenset(), joined)
        jobs = list(views.values())
        sizes = kept(snap, jobs, Workspace(snap))
        assert sizes == current_or_min(snap, jobs, Workspace(snap)) and sizes.keys() == views.keys()
    assert [found is not None for found in calls] == [False, True, True, False]  # (version 4 was not seen)
    assert cycle.KeptSizes.followed


def test_the_order_follows_the_journal_of_the_next_snapshot_only() -> None:
    """A view rebuilt at a snapshot the order did not visit in full (a pending pass, a decision with nobody
    pending) is not in the next snapshot's journal: that visit compares every view again. Asked directly: the
    replays above rarely skip a version with a view rebuilt in it."""
    spec = simple_job("a", 1)
    a1, a2 = (JobView(id="a", spec=spec, state=JobState.PENDING, submit_time=0) for _ in range(2))
    b = JobView(id="b", spec=simple_job("b", 1), state=JobState.PENDING, submit_time=1)
    order = TiresiasOrder(3600.0, 10.0)
    assert order(_snap({"a": a1, "b": b}, 1, frozenset())) == [a1, b]
    assert order.stamp == ("origin", 1)
    assert order._journal(_snap({"a": a1, "b": b}, 2, frozenset())) == []  # (the next snapshot: journaled)
    assert order(_snap({"a": a1, "b": b}, 2, frozenset())) == [a1, b] and order.stamp == ("origin", 2)
    again = order(_snap({"a": a2, "b": b}, 4, frozenset()))  # (version 3 rebuilt a's view: not journaled here)
    assert again[0] is a2 and order.views["a"] is a2
