"""Session 23's cut of the place loop: the blocked rest read off the order's kept line (`cycle.blocked_rest`).

Where every gang key still ahead failed with the current free total and every holder ahead keeps what it holds,
tiresias' place loop stops and takes the rest's outcome from `TiresiasOrder.line` (`PendingRank`): the same
waits, blocked jobs and line keys, in the same order, without a step per job. A contended replay plans alike
with `BlockedLine.cut` on and off (every plan, allocations and waits in order); at every cut the outcome is
checked against a walk of the rest job by job (the loop's own rule, written out here); srtf and trainmaster
(whose LAS order is the same class, without a reader) plan alike and keep no line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from tests.replay_helpers import Before, on_and_off, preset_plans

from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies import cycle
from trainmaster.policies.cycle import BlockedLine, GangKey, PendingRank, gang_key
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.tiresias import TiresiasOrder
from trainmaster.policies.waits import Wait
from trainmaster.policies.workspace import Workspace, minimum
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption
Failed = Mapping[GangKey, tuple[Resources, Wait]]


def _walk(jobs: list[JobView], at: int, failed: Failed, number: Any, ws: Workspace,
          sizes: Mapping[str, Mapping[Role, int]]) -> tuple[list[str], list[Any], list[Wait]] | None:
    """The place loop's steps over `jobs[at + 1:]` written out (holders keep what they hold; a pending job
    whose key failed with this free total waits with that wait): ids, keys and waits; None where a step would
    search or place."""
    ids: list[str] = []
    keys: list[Any] = []
    waits: list[Wait] = []
    for job in jobs[at + 1:]:
        want = sizes[job.id]
        held = ws.allocations.get(job.id)
        if held is not None:
            if held.tasks and held.role_counts == want:
                continue
            return None
        key = gang_key(job.spec, want, False)
        if key is None or job.allocation.tasks:
            return None
        seen = failed.get(number(key))
        if seen is None or seen[0] is not ws.total_free:
            return None
        ids.append(job.id)
        keys.append(number(key))
        waits.append(seen[1])
    return ids, keys, waits


def _as_walked(rest: Any, line: PendingRank, jid: str, failed: Failed, numbers: list[Any], ws: Workspace,
               views: Mapping[str, JobView]) -> bool:
    """A cut's outcome is the walk's, job for job (views: the loop's own objects); whether it cut. Also: the
    line's slots are its keys' (`keyed[slots[i]]` is the key of `order[i]`)."""
    assert [line.keyed[slot] for slot in line.slots] == [line.gang_of[rank[-1]][0] for rank in line.order]
    if not isinstance(rest, cycle.Rest):
        return False
    jobs = ws.ranked
    assert jobs is not None
    walked = _walk(jobs, ws.rank[jid], failed, lambda key: numbers[line.slot[key]], ws, ws.want)
    assert walked is not None
    ids, views_, keys, waits = rest
    assert ids == walked[0] and keys == walked[1]
    assert all(a is b for a, b in zip(waits, walked[2], strict=True))
    loops = [job for job in jobs[ws.rank[jid] + 1:] if job.id not in ws.allocations]
    assert len(views_) == len(loops) and all(v is job for v, job in zip(views_, loops, strict=True))
    return True


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_cut_plans_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BlockedLine, "cut_from", 8)  # (the synthetic line is short: cut it where it can be)
    spies: dict[str, Any] = {"rest": (cycle, "blocked_rest", _as_walked),
                             "order": (TiresiasOrder, "__call__", Before(lambda self, snap: self.keeps_line))}
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (BlockedLine, "cut"),
                            spies=spies, least=100)
    cuts = sum(fast.calls["rest"])
    if preset == "tiresias":
        assert cuts > 100 and len(fast.calls["rest"]) < 10 * cuts  # (the rest was left to the line, often)
        assert all(fast.calls["order"])
    else:
        assert not fast.calls["rest"]  # (no reader: srtf keeps no `PendingRank`, trainmaster's LAS order none)
        assert not any(fast.calls["order"])
    assert not slow.calls["rest"] and not any(slow.calls["order"])  # (the reference: no line, no cut)


def test_cut_on_a_bigger_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The product's `cut_from`, on a line long enough to reach it."""
    workload = load_workload("synthetic:400:120", max_factor=1.0, seed=5, oracle=True)
    spies: dict[str, Any] = {"rest": (cycle, "blocked_rest", _as_walked)}
    fast, _ = on_and_off(monkeypatch, lambda: preset_plans("tiresias", workload), (BlockedLine, "cut"),
                         spies=spies, least=100)
    assert sum(fast.calls["rest"]) > 20


# -- direct: where the cut must not be taken --------------------------------------------------------------


def _view(jid: str, gpus: int, state: JobState = JobState.PENDING) -> JobView:
    return JobView(id=jid, spec=simple_job(jid, gpus), state=state, submit_time=0)


def _setup(views: dict[str, JobView]) -> tuple[PendingRank, list[JobView], Workspace]:
    cluster = parse_shorthand("1x4")
    pending = PendingIds([jid for jid, v in views.items() if v.pending], "origin", 1, frozenset(), frozenset(),
                         frozenset())
    snap = Snapshot(now=0, cluster=cluster, jobs=views, free={n.name: n.capacity for n in cluster.nodes},
                    held={}, pending_ids=pending)
    line = PendingRank()
    ranks = {jid: (0, float(i), 0.0, jid) for i, jid in enumerate(views)}
    line.rebuild(snap, ranks.__getitem__)
    ws = Workspace(snap)
    jobs = list(views.values())
    ws.rank = {job.id: i for i, job in enumerate(jobs)}
    ws.ranked = jobs
    return line, jobs, ws


def _cut(*args: Any) -> cycle.Rest | None:
    rest = cycle.blocked_rest(*args)
    return rest if isinstance(rest, cycle.Rest) else None


def test_cut_needs_every_key_ahead_failed() -> None:
    views = {f"j{i}": _view(f"j{i}", 8 if i % 2 else 16) for i in range(6)}  # two keys, neither fits in 4 GPUs
    line, jobs, ws = _setup(views)
    sizes = {jid: minimum(v.spec) for jid, v in views.items()}
    eight = gang_key(views["j1"].spec, sizes["j1"], False)
    sixteen = gang_key(views["j0"].spec, sizes["j0"], False)
    assert eight is not None and sixteen is not None
    numbers = list(line.keyed)  # (the loop's keys: the tuples themselves)
    for job in jobs[:2]:
        ws.block_for_room(job, sizes[job.id])
    failed: dict[GangKey, tuple[Resources, Wait]] = {sixteen: (ws.total_free, ws.waits["j0"])}
    assert cycle.blocked_rest(line, "j0", failed, numbers, ws, views) == cycle.Awaited(eight)  # (j1's key)
    failed[eight] = (ws.total_free, ws.waits["j1"])
    rest = _cut(line, "j1", failed, numbers, ws, views)
    assert rest is not None and rest[0] == ["j2", "j3", "j4", "j5"] and rest[2] == [sixteen, eight] * 2
    assert rest[1] == [views[jid] for jid in rest[0]] and rest[3] == [ws.waits["j0"], ws.waits["j1"]] * 2
    ws.total_free = Resources(gpu=4)  # (another object: something moved since the failures)
    assert _cut(line, "j1", failed, numbers, ws, views) is None
    ws.total_free = failed[eight][0]
    ws.rejected["j3"] = "never fits"  # (rejected: in the line, not among the loop's jobs)
    rest = _cut(line, "j1", failed, numbers, ws, views)
    assert rest is not None and rest[0] == ["j2", "j4", "j5"] and rest[2] == [sixteen, sixteen, eight]
    ws.rejected = {"j2": "never fits", "j4": "never fits"}  # (a key whose jobs ahead are all rejected)
    del failed[sixteen]
    rest = _cut(line, "j1", failed, numbers, ws, views)
    assert rest is not None and rest[0] == ["j3", "j5"] and rest[3] == [ws.waits["j1"]] * 2
    rest = _cut(line, "j0", failed, numbers, ws, views)  # (its own key: only rejected jobs after)
    assert rest is not None and rest[0] == ["j1", "j3", "j5"]
    ws.rejected = {}
    assert _cut(line, "j0", failed, numbers, ws, views) is None
    assert cycle.blocked_rest(line, "j9", failed, numbers, ws, views) is None  # (not in the line)


def test_cut_off_the_line_when_it_cannot_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line the order did not move to this very snapshot, or whose count disagrees with the loop's jobs,
    is not read: the loop walks every job."""
    monkeypatch.setattr(BlockedLine, "cut_from", 1)
    views = {f"j{i}": _view(f"j{i}", 16) for i in range(6)}
    line, jobs, ws = _setup(views)
    sizes = {jid: minimum(v.spec) for jid, v in views.items()}
    calls = []
    real = cycle.blocked_rest
    monkeypatch.setattr(cycle, "blocked_rest", lambda *a: calls.append(a) or real(*a))
    place = cycle.place_in_order(strict=False, ranked=line)
    line.at = ws.snap
    assert [job.id for job in place(ws.snap, jobs, sizes, ws)] == list(views)
    assert len(calls) == 1 and ws.blocked_line is not None and len(ws.blocked_line[1]) == 6
    for at, extra in ((None, False), (ws.snap, True)):
        line.at = at
        if extra:
            line.gang_of["ghost"] = line.gang_of["j0"]  # (a count that disagrees)
        calls.clear()
        _, jobs, ws = _setup(views)
        if at is not None:
            line.at = ws.snap
        assert [job.id for job in place(ws.snap, jobs, sizes, ws)] == list(views)
        assert not calls
