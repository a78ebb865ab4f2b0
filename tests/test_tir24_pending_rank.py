"""Session 22's `cycle.PendingRank`: the pending jobs in rank order with their gang keys, kept by the order.

`TiresiasOrder.line` is moved on by the snapshot's journal (`PendingIds.changed`, `joined`, `left`) and by the
order's own rekeying (starvation promotions: a pending job's rank moves without a new view). At every full
visit of a contended replay (tiresias; trainmaster's LAS rule, the same order class) it must equal a rebuild
from the snapshot's pending ids: the ranks in order, each gang key's part, each job's key. The plans are the
same with the line kept, rebuilt every time (`PendingRank.kept = False`) or not kept at all (the product's
default, `TiresiasOrder.ranked_line = False`, until a place phase reads it).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.replay_helpers import on_and_off, preset_plans

from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.policies.cycle import PendingRank, gang_key
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.tiresias import TiresiasOrder
from trainmaster.policies.workspace import minimum
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption


def _as_rebuilt(order: list[JobView], self: TiresiasOrder, snap: Snapshot) -> int | None:
    """After a full visit: the kept line is a rebuild's, and each pending job's key is `gang_key`'s at its
    minimum (mixed and not); the number of pending jobs (None after a partial visit)."""
    if self.partial:
        assert self.line.stamp is None
        return None
    line, fresh = self.line, PendingRank()
    fresh.rebuild(snap, self._rank_key)
    assert line.order == fresh.order and line.gang_of == fresh.gang_of and line.anchored == fresh.anchored
    assert line.by_gang == fresh.by_gang
    pending = [jid for jid, job in snap.jobs.items() if job.pending]
    assert line.order == sorted(self.entries[jid].key for jid in pending)
    ranked = [job.id for job in order if job.pending]  # (the order's own pending jobs, in its order)
    assert [rank[-1] for rank in line.order] == ranked
    for mixed in (False, True):
        assert line.gangs(mixed) == [gang_key(snap.jobs[jid].spec, minimum(snap.jobs[jid].spec), mixed)
                                     for jid in ranked]
    return len(pending)


@pytest.mark.parametrize("preset", ["tiresias", "trainmaster"])
def test_kept_line_is_a_rebuild_at_every_visit(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TiresiasOrder, "ranked_line", True)  # (off in the product until a reader needs it)
    spies: dict[str, Any] = {"order": (TiresiasOrder, "__call__", _as_rebuilt),
                             "rebuild": (PendingRank, "rebuild")}
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (PendingRank, "kept"),
                            spies=spies, least=100)
    full = [n for n in fast.calls["order"] if n is not None]
    assert len(full) > 50 and max(full) > 20  # (a long line was followed)
    fresh = len(fast.calls["rebuild"]) - len(full)  # (less the spy's own rebuilds: one per full visit)
    assert fresh < 0.2 * len(full)  # the journal served most full visits
    reference = [n for n in slow.calls["order"] if n is not None]
    assert len(slow.calls["rebuild"]) == 2 * len(reference)  # (off: every full visit rebuilds)


def test_plans_alike_without_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing reads the line yet: keeping it changes no plan (`TiresiasOrder.ranked_line`)."""
    on_and_off(monkeypatch, lambda: preset_plans("tiresias", WORKLOAD), (TiresiasOrder, "ranked_line"), least=100)


def _snap(views: dict[str, JobView], version: int, changed: frozenset[str], joined: frozenset[str] = frozenset(),
          left: frozenset[str] = frozenset()) -> Snapshot:
    cluster = parse_shorthand("2x4")
    held = {jid: v.allocation for jid, v in views.items() if v.active}
    pending = PendingIds([jid for jid, v in views.items() if v.pending], "origin", version, joined, left, changed)
    return Snapshot(now=0, cluster=cluster, jobs=views, free={n.name: n.capacity for n in cluster.nodes},
                    held=held, pending_ids=pending)


def _view(jid: str, gpus: int, state: JobState = JobState.PENDING) -> JobView:
    return JobView(id=jid, spec=simple_job(jid, gpus), state=state, submit_time=0)


def test_journal_moves_the_line_and_a_skipped_version_rebuilds() -> None:
    """Direct: a job that joined is added under its key, one that left the line (`left`, still live) goes,
    a rebuilt view with another size moves to its new key; a skipped version rebuilds."""
    rank = {jid: (0, float(i), 0.0, jid) for i, jid in enumerate("abcdef")}
    line = PendingRank()
    views = {jid: _view(jid, 1 + i % 2) for i, jid in enumerate("abcd")}
    line.follow(_snap(views, 1, frozenset()), rank.__getitem__)
    assert line.rebuilt == 1 and [r[-1] for r in line.order] == list("abcd")
    one, two = (gang_key(views[j].spec, minimum(views[j].spec), False) for j in "ab")
    assert [r[-1] for r in line.by_gang[one]] == ["a", "c"] and [r[-1] for r in line.by_gang[two]] == ["b", "d"]
    views["e"] = _view("e", 1)
    views["c"] = _view("c", 2)  # (a rebuilt view: another size)
    views["b"] = _view("b", 2, JobState.RUNNING)  # (its allocation is not read here)
    line.follow(_snap(views, 2, frozenset({"c", "b"}), joined=frozenset({"e"}), left=frozenset({"b"})),
                rank.__getitem__)
    assert line.rebuilt == 1  # (the journal served)
    assert [r[-1] for r in line.order] == list("acde")
    assert [r[-1] for r in line.by_gang[one]] == ["a", "e"] and [r[-1] for r in line.by_gang[two]] == ["c", "d"]
    line.move("d", (0, -1.0, 0.0, "d"))
    assert [r[-1] for r in line.order] == list("dace") and line.by_gang[two][0][-1] == "d"
    line.follow(_snap(views, 4, frozenset()), rank.__getitem__)  # (version 3 skipped)
    assert line.rebuilt == 2 and [r[-1] for r in line.order] == list("acde")


def test_an_unjournaled_departure_rebuilds_and_anchored_gangs_have_no_key_when_mixed() -> None:
    """Direct: a pending job gone from the snapshot with no journal entry (the count disagrees) rebuilds; an
    elastic gang of several tasks anchored on on-demand nodes has a key on a plain cluster, none on a mixed one
    (`gang_key`'s rule). The replays have neither."""
    rank = {jid: (0, float(i), 0.0, jid) for i, jid in enumerate("abc")}
    line = PendingRank()
    views = {jid: _view(jid, 1) for jid in "ab"}
    views["c"] = JobView(id="c", spec=simple_job("c", 2, min_gpus=2, max_gpus=4, anchors_on_demand=True),
                         state=JobState.PENDING, submit_time=0)
    assert views["c"].spec.anchored
    line.follow(_snap(views, 1, frozenset()), rank.__getitem__)
    c = gang_key(views["c"].spec, minimum(views["c"].spec), False)
    assert c is not None and gang_key(views["c"].spec, minimum(views["c"].spec), True) is None
    assert line.gangs(False)[2] == c and line.gangs(True)[2] is None and line.anchored == {"c"}
    del views["a"]
    line.follow(_snap(views, 2, frozenset()), rank.__getitem__)
    assert line.rebuilt == 2 and [r[-1] for r in line.order] == ["b", "c"]
