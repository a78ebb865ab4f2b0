"""Session 18 (rep19): the busy trainmaster decision's cuts answer as the code they replaced.

Each cut is checked against its reference (the replaced code, written out here) on seeded random cases or a
busy line; the pinned plan digests (`test_recorded_plans.py`, `test_trainmaster_busy_reads.py`) check the
decisions as a whole.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from operator import attrgetter
from types import MappingProxyType, SimpleNamespace

import pytest
from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, job, pending, running, snapshot
from tests.replay_helpers import spy_live_kinds

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.job import JobKind, JobSpec, Role
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.backfill import _head
from trainmaster.policies.fairshare import FairPlace
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.live import LiveKinds
from trainmaster.policies.preemption import MIN_RUNTIME, QueueRules, _Holders
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.trainmaster import GainSizing, OnlyWithServices
from trainmaster.policies.waits import WaitKind
from trainmaster.policies.workspace import Workspace

_KIND_PRIORITY = attrgetter("spec.kind", "spec.priority")


def _reference_idle(rule: QueueRules, claimants: list[JobView]) -> bool:
    """`QueueRules.idle` as it was: one claimant per (kind, priority), the kind a `JobKind` key."""
    if rule.ws.queued:
        return False
    one_each = dict(zip(map(_KIND_PRIORITY, claimants), claimants, strict=True))
    if rule.quick_idle and rule._holders is None:
        classes = list(one_each)
        if not classes:
            return True
        if not any(kind is JobKind.SERVICE for kind, _ in classes):
            snap = rule.ws.snap
            held = [snap.jobs[jid].spec.priority for jid in rule.ws.allocations if jid in snap.jobs]
            if not held or max(priority for _, priority in classes) <= min(held):
                return True
    return not any(rule.holders.any(claimant, False) for claimant in one_each.values())


def _spec(name: str, priority: int, kind: JobKind) -> JobSpec:
    return replace(job(name, 1), priority=priority, kind=kind)


def test_idle_asks_one_claimant_per_class_as_the_kind_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """`QueueRules.idle`: classes keyed by (a service?, priority) -- the same verdicts, and the holders' index
    asked about the very same claimants (the last of each class), as with `JobKind` keys."""
    asked: list[str] = []
    real_any = _Holders.any

    def spy(self: _Holders, claimant: JobView, quota_blocked: bool) -> bool:
        asked.append(claimant.id)
        return real_any(self, claimant, quota_blocked)

    monkeypatch.setattr(_Holders, "any", spy)
    rng = random.Random(19)
    cl = cluster(8, 4)
    verdicts = set()
    for _ in range(120):
        holders = [running(f"h{k}", 1, on=f"n{k}", since=-1e6,
                           spec=_spec(f"h{k}", rng.randint(0, 2), JobKind.TRAINING)) for k in range(rng.randint(0, 4))]
        waiting = [pending(f"c{k}", spec=_spec(f"c{k}", rng.randint(0, 3),
                                                rng.choice([JobKind.TRAINING] * 4 + [JobKind.SERVICE])))
                   for k in range(rng.randint(0, 8))]
        snap = snapshot(cl, *holders, *waiting)
        claimants = [snap.jobs[view.id] for view in waiting]
        rng.shuffle(claimants)
        for quick in (True, False):
            monkeypatch.setattr(QueueRules, "quick_idle", quick)
            asked.clear()
            got = QueueRules(Workspace(snap), MIN_RUNTIME, True).idle(claimants)
            new_asked = list(asked)
            asked.clear()
            want = _reference_idle(QueueRules(Workspace(snap), MIN_RUNTIME, True), claimants)
            assert got is want and new_asked == asked
            verdicts.add(want)
    assert verdicts == {True, False}


def _ws_with_waits(snap: Snapshot, waits: Mapping[str, WaitKind | None]) -> Workspace:
    ws = Workspace(snap)
    for jid, kind in waits.items():
        if kind is not None:
            ws.block(jid, kind, "why")
    return ws


def test_head_takes_the_earliest_of_either_capacity_kind() -> None:
    """`backfill._head`: each capacity kind searched only up to the earliest match so far; a held match passed
    over; the first of either kind, whichever kind is searched first; none without a match."""
    cl = cluster(2, 4)
    views = [running("h", 1, on="n0"), pending("a"), pending("b"), pending("c"), pending("d")]
    snap = snapshot(cl, *views)
    line = [snap.jobs[jid] for jid in ("h", "a", "b", "c", "d")]
    gang, frag, prio = WaitKind.GANG, WaitKind.FRAGMENTATION, WaitKind.PRIORITY
    cases: list[tuple[dict[str, WaitKind | None], str | None]] = [
        ({"h": gang, "a": prio, "b": frag, "c": gang}, "b"),  # (the held one passed over)
        ({"h": frag, "a": gang, "b": frag}, "a"),
        ({"a": prio, "b": gang, "c": frag, "d": gang}, "b"),
        ({"a": prio, "b": frag, "c": gang, "d": frag}, "b"),
        ({"h": gang, "a": None, "b": WaitKind.QUOTA, "c": WaitKind.RESERVATION}, None),
        ({}, None),
    ]
    for waits, want in cases:
        got = _head(line, _ws_with_waits(snap, waits))
        assert (got.id if got is not None else None) == want, waits


def _views(rng: random.Random, specs: list[JobSpec], n: int) -> list[JobView]:
    return [JobView(id=f"j{k}", spec=rng.choice(specs), state=JobState.PENDING, submit_time=0.0) for k in range(n)]


_SPECS = [job("fixed", 2), job("elastic", 2, min_gpus=1, max_gpus=4), job("svc", 1, kind=JobKind.SERVICE),
          job("esvc", 1, min_gpus=1, max_gpus=2, kind=JobKind.SERVICE)]


def test_live_kinds_as_the_passes_and_read_once_per_workspace() -> None:
    """`LiveKinds.of`: a service, an elastic job, an elastic training job among the live jobs, as generators
    say; `Workspace.live_kinds` reads them once per workspace (the jobs not read again), a new workspace on
    the same snapshot afresh (rep21: the memo moved from the preset into the workspace)."""
    rng = random.Random(7)
    seen = set()
    reads: list[int] = []

    class Counting(dict[str, JobView]):
        def values(self):  # type: ignore[no-untyped-def, override]
            reads.append(1)
            return super().values()

    for _ in range(200):
        views = _views(rng, _SPECS, rng.randint(0, 6))
        reads.clear()
        snap = SimpleNamespace(jobs=Counting({v.id: v for v in views}))
        got = LiveKinds.of(snap)  # type: ignore[arg-type]
        want = (any(v.spec.kind is JobKind.SERVICE for v in views), any(v.spec.elastic for v in views),
                any(v.spec.elastic and v.spec.kind is JobKind.TRAINING for v in views))
        assert (got.service, got.elastic, got.elastic_training) == want
        assert len(reads) == 1
        ws = object.__new__(Workspace)  # (only what `live_kinds` reads: the snapshot and the memo slot)
        ws.snap, ws._live = snap, None  # type: ignore[assignment]
        assert ws.live_kinds == got and ws.live_kinds is ws.live_kinds
        assert len(reads) == 2
        other = object.__new__(Workspace)
        other.snap, other._live = snap, None  # type: ignore[assignment]
        assert other.live_kinds == got and len(reads) == 3
        seen.add(want)
    assert len(seen) >= 5


def test_the_preset_reads_live_kinds_once_per_decision_in_its_workspace() -> None:
    """The size hooks and the cycle's resize tick read one `LiveKinds` per decision, kept in the decision's
    workspace: a second decision on the same snapshot object reads the live jobs again; nothing is kept on
    the preset."""
    policy = make_policy("trainmaster")
    size = policy.size  # (`GainSizing.size`'s closure: its `self` and the base hook)
    cells = dict(zip(size.__code__.co_freevars, (c.cell_contents for c in size.__closure__ or ()), strict=True))
    sizing, base = cells["self"], cells["base"]
    assert isinstance(sizing, GainSizing) and isinstance(base, OnlyWithServices)
    assert not any(isinstance(v, LiveKinds) for o in (policy, sizing, base) for v in vars(o).values())
    snap = bench_snapshot(busy=True, pending=30)
    with pytest.MonkeyPatch.context() as patch:
        computed, asked = spy_live_kinds(patch)
        policy.decide(snap)
        assert computed == [snap] and len(asked) >= 2 and len(set(map(id, asked))) == 1
        policy.decide(snap)
        assert computed == [snap, snap] and len(set(map(id, asked))) == 2


def test_gain_sizing_skips_without_a_live_elastic_training_job_and_asks_the_admitted_ones() -> None:
    """`GainSizing.size`: the greedy runs only where an admitted job is an elastic training job -- a live one
    that is not admitted (not handed to the hook) does not run it, nor does an elastic service."""
    cl = cluster(2, 4)
    elastic = pending("e", spec=job("e", 2, min_gpus=1, max_gpus=4))
    service = pending("s", spec=job("s", 1, min_gpus=1, max_gpus=2, kind=JobKind.SERVICE))
    fixed = pending("f", 2)
    ran: list[int] = []

    class Greedy:
        def size(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> dict[str, dict[Role, int]]:
            ran.append(len(jobs))
            return {}

    for live, admitted, runs in (((fixed, service), ("f", "s"), False), ((fixed, elastic), ("f",), False),
                                 ((fixed, elastic), ("f", "e"), True), ((elastic,), ("e",), True)):
        ran.clear()
        snap = snapshot(cl, *live)
        sizing = GainSizing(Greedy())  # type: ignore[arg-type]
        hook = sizing.size(lambda snap, jobs, ws: {})
        hook(snap, [snap.jobs[jid] for jid in admitted], Workspace(snap))
        assert bool(ran) is runs, (live, admitted)


def test_settled_leaves_each_class_ending_on_a_holder_through_a_busy_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.settled` returns at once when nobody was evicted for the claimant: through two busy
    decisions, after every call the last entry of every class still holds tasks (what the skipped pass would
    have found at its first step), and both kinds of calls happen."""
    calls = {"none": 0, "some": 0}
    real = SameClassLowerRank.settled

    def checked(self: SameClassLowerRank, claimant: JobView, evicted: list[JobView], placed: bool) -> None:
        calls["some" if evicted else "none"] += 1
        real(self, claimant, evicted, placed)
        for ids in self.ids.values():
            if ids:
                held = self.ws.allocations.get(ids[-1])
                assert held is not None and held.tasks

    monkeypatch.setattr(SameClassLowerRank, "settled", checked)
    snap = bench_snapshot(busy=True, pending=1500)
    policy = make_policy("trainmaster")
    policy.decide(snap)
    policy.decide(snap)
    assert calls["none"] > 100 and calls["some"] > 100


def _reference_any_resize(equal: dict[str, tuple[Allocation, Mapping[Role, int]]],
                          allocations: Mapping[str, Allocation], sizes: Mapping[str, Mapping[Role, int]]) -> bool:
    """`FairPlace._any_resize` as it was: a Python step per holder."""
    for jid, held in allocations.items():
        want = sizes.get(jid)
        if want is None:
            continue
        got = equal.get(jid)
        if got is not None and got[0] is held and got[1] is want:
            continue
        if not held:
            continue
        if not all(held.count(r) == n for r, n in want.items()):
            return True
        equal[jid] = (held, want)
    return False


def test_any_resize_as_the_loop_with_the_same_entries_kept() -> None:
    """`FairPlace._any_resize`: the verdict and the entries it keeps (up to the first differing holder, in the
    allocations' order) as the loop it replaced, on random holders, sizes and kept entries."""
    rng = random.Random(23)
    spec = job("x", 1)
    shapes = [Allocation(), *(Allocation.of(Placement(Role.WORKER, "n0") for _ in range(k)) for k in (1, 2))]
    verdicts = set()
    for _ in range(300):
        ids = [f"j{k}" for k in range(rng.randint(0, 8))]
        allocations = {jid: rng.choice(shapes) for jid in ids}
        sizes: dict[str, Mapping[Role, int]] = {}
        for jid in ids:
            if rng.random() < 0.8:
                sizes[jid] = {Role.WORKER: rng.choice([allocations[jid].count(Role.WORKER)] * 3 + [1, 2])}
        kept: dict[str, tuple[Allocation, Mapping[Role, int]]] = {}
        for jid in ids:
            if rng.random() < 0.5 and jid in sizes:
                kept[jid] = (allocations[jid] if rng.random() < 0.7 else rng.choice(shapes),
                             sizes[jid] if rng.random() < 0.7 else dict(sizes[jid]))
        place = FairPlace(strict=True)
        place.equal = dict(kept)
        reference = dict(kept)
        snap = SimpleNamespace(jobs=MappingProxyType(dict.fromkeys(ids, spec)))
        got = place._any_resize(snap, allocations, sizes)  # type: ignore[arg-type]
        want = _reference_any_resize(reference, allocations, sizes)
        assert got is want and place.equal == reference
        assert all(place.equal[jid][0] is reference[jid][0] and place.equal[jid][1] is reference[jid][1]
                   for jid in reference)
        verdicts.add(want)
    assert verdicts == {True, False}


def test_claimants_read_the_set_up_ranks_for_the_line_handed_at_set_up() -> None:
    """`SameClassLowerRank.claimants`: the blocked jobs' ranks read at set-up serve the very list handed then;
    another list (the same jobs reordered) is ranked afresh -- both sorted by rank, stably."""
    snap = bench_snapshot(busy=True, pending=80)
    rng = random.Random(29)
    views = list(snap.jobs.values())
    for _ in range(40):
        ws = Workspace(snap)
        ranked = rng.sample(views, 70)
        ws.rank = {view.id: rng.randint(0, 20) for view in ranked}
        blocked = rng.sample(views, 40)
        rule = SameClassLowerRank(ws, blocked)
        last = len(ws.rank)

        def reference(line: list[JobView]) -> list[str]:
            return [v.id for v in sorted(line, key=lambda v: ws.rank.get(v.id, last))]  # noqa: B023

        got = rule.claimants(blocked)
        assert [v.id for v in got] == reference(blocked) and got is not blocked
        other = blocked[::-1]
        assert [v.id for v in rule.claimants(other)] == reference(other)


def test_room_is_zero_for_a_claimant_nobody_may_be_evicted_for() -> None:
    """`SameClassLowerRank.room`: nothing (the shared zero) for a claimant ranked after every holder of its class,
    for a service (no class) and for a class without holders; what the holders after it hold otherwise."""
    cl = cluster(4, 4)
    views = [running("h1", 2, on="n0"), running("h2", 2, on="n1"), pending("early"), pending("late"),
             pending("svc", spec=job("svc", 1, kind=JobKind.SERVICE)), pending("other", spec=replace(job("other", 1),
                                                                                                   priority=5))]
    snap = snapshot(cl, *views)
    ws = Workspace(snap)
    ws.rank = {"early": 0, "h1": 1, "h2": 2, "late": 3, "svc": 4, "other": 5}
    rule = SameClassLowerRank(ws)
    early = rule.room(snap.jobs["early"])
    assert early is not None and early.gpu == 4  # (what h1 and h2 hold)
    for name in ("late", "svc", "other"):
        room = rule.room(snap.jobs[name])
        assert room is not None and room.is_zero() and room == Resources(), name
