"""Session 17 (rep17): the busy trainmaster decision's reads in C-level passes answer as the loops they replaced.

Each fast read is checked against its reference (the Python step it replaced, written out here) on seeded
random cases, and the one shortcut in placement (`try_place` without queues for a job holding nothing) against
`Workspace.choose`: where the job runs now is still preferred. The pinned plan digests
(`test_recorded_plans.py`) check the decisions as a whole.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, job, pending, running, snapshot

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobKind, Role
from trainmaster.core.resources import Resources
from trainmaster.policies.backfill import _head
from trainmaster.policies.fairshare import FairPlace
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.queues import try_place
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.trainmaster import OnlyWithServices, _any_elastic_training
from trainmaster.policies.waits import CAPACITY, WaitKind
from trainmaster.policies.workspace import Workspace, minimum


def _reference_head(blocked: list[JobView], ws: Workspace) -> JobView | None:
    return next((j for j in blocked if j.id not in ws.allocations and ws.kind(j.id) in CAPACITY), None)


def test_head_is_the_first_blocked_job_holding_nothing_that_waits_for_room() -> None:
    """`backfill._head`: every wait kind, no wait, held here, and none at all, on random lines."""
    snap = bench_snapshot(busy=True, pending=60)
    rng = random.Random(17)
    views = list(snap.jobs.values())
    kinds = [*WaitKind, None]
    found = 0
    for _ in range(300):
        ws = Workspace(snap)
        blocked = rng.sample(views, rng.randint(0, 40))
        for view in blocked:
            kind = rng.choice(kinds)
            if kind is not None:
                ws.block(view.id, kind, "why")
        got, want = _head(blocked, ws), _reference_head(blocked, ws)
        assert got is want
        found += want is not None and any(view.id in ws.allocations for view in blocked[:blocked.index(want)])
    assert found > 10  # (held jobs waiting for room passed over on the way)


def test_try_place_without_queues_prefers_where_the_job_runs_now() -> None:
    """Without queues a job holding nothing whose view holds no tasks goes straight to `find`; one whose view
    holds tasks (released here) still goes through `choose` (its own nodes first), one held here grows."""
    cl = cluster(4, 4)
    views = [running("a", 2, on="n2"), running("b", 2, on="n1"), running("c", 4, on="n0"), running("d", 2, on="n3"),
             pending("p", 2), pending("q", 8)]
    snap = snapshot(cl, *views)
    ws = Workspace(snap)
    a, b, p, q = snap.jobs["a"], snap.jobs["b"], snap.jobs["p"], snap.jobs["q"]
    ws.release(a)
    ws.release(b)  # (n1 and n2 both have all 4 GPUs free now)
    expected = ws.choose(a, {Role.WORKER: 2})
    assert expected is not None and expected.nodes == ("n2",)
    assert ws.find(a, {Role.WORKER: 2}) != expected  # (without the preference it would go elsewhere)
    assert try_place(ws, a, {Role.WORKER: 2}) == expected and ws.allocations["a"] == expected
    placed = try_place(ws, p, {Role.WORKER: 2})
    assert placed is not None and not isinstance(placed, str) and ws.allocations["p"] == placed
    assert try_place(ws, q, minimum(q.spec)) is None and "q" not in ws.allocations  # (too big: nothing moved)
    grown = try_place(ws, a, {Role.WORKER: 4})  # (held here: its own tasks count as free)
    assert grown is not None and not isinstance(grown, str) and grown.count(Role.WORKER) == 4


def test_any_elastic_training_as_the_loop() -> None:
    """`trainmaster._any_elastic_training` against the generator it replaced, on random job lists."""
    rng = random.Random(5)
    specs = [job("fixed", 2), job("elastic", 2, min_gpus=1, max_gpus=4),
             job("svc", 1, kind=JobKind.SERVICE), job("esvc", 1, min_gpus=1, max_gpus=2, kind=JobKind.SERVICE)]
    seen = set()
    for _ in range(200):
        jobs = [pending(f"j{k}", spec=rng.choice(specs)) for k in range(rng.randint(0, 6))]
        want = any(j.spec.elastic and j.spec.kind is JobKind.TRAINING for j in jobs)
        assert _any_elastic_training(jobs) is want
        seen.add(want)
    assert seen == {True, False}


def test_services_switch_the_base_size_hook() -> None:
    """`OnlyWithServices`: the shrinking hook while some live job is a service, the kept sizes otherwise."""
    calls: list[int] = []

    def shrink(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> dict[str, Mapping[Role, int]]:
        calls.append(len(jobs))
        return {}

    hook = OnlyWithServices(shrink)
    cl = cluster(2, 4)
    plain = snapshot(cl, pending("a", 1), running("b", 2, on="n0"))
    served = snapshot(cl, pending("a", 1), running("b", 2, on="n0"),
                      running("s", 1, on="n1", spec=job("s", 1, kind=JobKind.SERVICE)))
    sizes = hook(plain, list(plain.jobs.values()), Workspace(plain))
    assert calls == [] and set(sizes) == {"a", "b"}
    assert hook(served, list(served.jobs.values()), Workspace(served)) == {} and calls == [3]


def test_las_claimants_in_rank_order_stably() -> None:
    """`SameClassLowerRank.claimants`: a new list sorted by rank (unranked last), ties in the given order."""
    snap = bench_snapshot(busy=True, pending=80)
    rng = random.Random(3)
    views = list(snap.jobs.values())
    for _ in range(50):
        ws = Workspace(snap)
        ranked = rng.sample(views, 60)
        ws.rank = {view.id: rng.randint(0, 9) for view in ranked}  # (ties on purpose)
        blocked = rng.sample(views, 50)
        rule = SameClassLowerRank(ws)
        got = rule.claimants(blocked)
        assert got == sorted(blocked, key=lambda j: ws.rank.get(j.id, len(ws.rank))) and got is not blocked


def test_fair_place_reads_pending_jobs_with_a_size_only() -> None:
    """`FairPlace`: running jobs and pending jobs without a size are not placed as pending; the rest in order."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("r", 4, on="n0"), pending("a", 2, submit=1), pending("b", 2, submit=2),
                    pending("c", 4, submit=3), pending("d", 1, submit=4))
    ws = Workspace(snap)
    jobs = [snap.jobs[jid] for jid in ("r", "a", "d", "b", "c")]
    sizes = {jid: minimum(snap.jobs[jid].spec) for jid in ("r", "a", "b", "c")}  # (no size for d)
    blocked = FairPlace(strict=True)(snap, jobs, sizes, ws)
    assert set(ws.allocations) == {"r", "a", "b"} and ws.allocations["r"] == snap.jobs["r"].allocation
    assert [j.id for j in blocked] == ["c"] and "d" not in ws.waits



def _busy_digest(pending_jobs: int) -> str:
    """A digest of trainmaster's first and steady plans on the bench's busy snapshot: allocations and wait
    kinds, in the plans' own order."""
    snap = bench_snapshot(busy=True, pending=pending_jobs)
    policy = make_policy("trainmaster")
    text = []
    for plan in (policy.decide(snap), policy.decide(snap)):
        text.append(repr(list(plan.allocations.items())))
        text.append(repr([(jid, wait.kind.value) for jid, wait in plan.waits.items()]))
        text.append(repr(sorted(plan.reasons.items())))
    return hashlib.sha256("\n".join(text).encode()).hexdigest()[:16]


BUSY_PINNED = {3000: "c226ad07445a1e7a"}  # recorded with the code before Session 17 (57591eb)


def test_busy_trainmaster_plans_are_pinned() -> None:
    """The busy decision plans as before these reads (the LAS pass's room, victims and settling on its path:
    2,000 holders, a line far longer than the victims make room for)."""
    assert _busy_digest(3000) == BUSY_PINNED[3000]


def test_las_room_victims_and_settling_against_the_holders() -> None:
    """`SameClassLowerRank`: `room` is what the claimant's class holders ranked after it held at set-up (read
    inline once summed, any claimant order); `candidates` are those still holding tasks, lowest ranked first
    (an entry emptied here is no victim); `settled` drops emptied entries off the end."""
    snap = bench_snapshot(busy=True, pending=40)
    rng = random.Random(11)
    ids = list(snap.jobs)
    rng.shuffle(ids)
    ws = Workspace(snap)
    ws.rank = {jid: k for k, jid in enumerate(ids)}
    rule = SameClassLowerRank(ws)
    holders = [snap.jobs[jid] for jid in ids if jid in ws.allocations]

    def after(claimant: JobView) -> list[JobView]:
        mine = ws.rank[claimant.id]
        return [h for h in holders if ws.rank[h.id] > mine and ws.queue_of(h) == ws.queue_of(claimant)
                and h.spec.priority == claimant.spec.priority and ws.allocations.get(h.id)]

    claimants = [snap.jobs[jid] for jid in snap.pending_ids]  # type: ignore[union-attr]
    for claimant in [*claimants, *rng.sample(claimants, len(claimants))]:  # (the second time: summed, inline)
        want = sum((h.allocation.resources(h.spec) for h in after(claimant)), start=Resources())
        assert rule.room(claimant) == want
    claimant = min(claimants, key=lambda c: (not after(c), ws.rank[c.id]))  # (the first with victims)
    victims = after(claimant)
    assert len(victims) > 3
    ws.assign(victims[1], Allocation())  # (emptied here: held nothing)
    got = [job.id for job, _ in rule.candidates(claimant)]
    assert got == [h.id for h in reversed(victims) if h is not victims[1]]
    key = (ws.queue_of(claimant), claimant.spec.priority)
    last = rule.ids[key][-1]
    ws.assign(snap.jobs[last], Allocation())
    rule.settled(claimant, [snap.jobs[last]], True)  # (evicted for good: it holds nothing now)
    assert rule.ids[key][-1] != last and ws.allocations[rule.ids[key][-1]].tasks
