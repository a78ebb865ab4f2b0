"""The policy core's pieces: workspace trials, the queue book kept in step, node scorers, explicit state."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, node, pending, running, snapshot
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import Role
from trainmaster.core.node import Node
from trainmaster.core.queue import QueueSpec
from trainmaster.core.resources import Resources
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.queuebook import QueueBook
from trainmaster.policies.registry import available, make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.waits import WaitKind
from trainmaster.policies.workspace import TIGHTEST, Workspace, tightest_fit


def _usage(book: QueueBook) -> dict[str, Resources]:
    return {q: r for q, r in book.usage.items() if not r.is_zero()}


def _state(ws: Workspace) -> tuple[object, ...]:
    return (dict(ws.free), dict(ws.allocations), ws.total_free, _usage(ws.book),
            {q: +c for q, c in ws.book.by_type.items() if +c})


def test_a_discarded_trial_leaves_everything_as_it_was_and_a_committed_one_keeps_it() -> None:
    snap = snapshot(cluster(2, 4), running("a", 2, on="n0", queue="x"), running("b", 4, on="n1", queue="y"),
                    pending("c", 2, queue="x"))
    snap = Snapshot(now=0.0, cluster=snap.cluster, jobs=snap.jobs, free=snap.free,
                    queues={"x": QueueSpec("x"), "y": QueueSpec("y")})
    ws = Workspace(snap)
    before = _state(ws)
    outer = ws.trial()
    ws.release(snap.jobs["b"])
    inner = ws.trial()
    found = ws.find(snap.jobs["c"], {Role.WORKER: 2})
    assert found is not None
    ws.assign(snap.jobs["c"], found)
    inner.commit()  # kept, but the outer trial can still undo it
    ws.release(snap.jobs["a"])
    assert ws.book.usage["y"] == Resources() and "c" in ws.allocations
    outer.discard()
    assert _state(ws) == before
    kept = ws.trial()
    ws.release(snap.jobs["a"])
    kept.commit()
    assert "a" not in ws.allocations and ws.book.usage["x"] == Resources()
    assert _usage(ws.book) == _usage(QueueBook(snap, ws.allocations))  # in step with a book built afresh


def test_an_inner_trial_discarded_inside_an_outer_one_stays_undone_when_the_outer_is_discarded() -> None:
    """A placement that tries something inside a caller's trial (anchored gangs inside `earliest_start`): the
    inner undo must not be replayed by the outer discard, which would put back what the inner one took away."""
    snap = snapshot(cluster(2, 4), running("a", 2, on="n0"), pending("c", 2))
    ws = Workspace(snap)
    before = _state(ws)
    outer = ws.trial()
    inner = ws.trial()
    found = ws.find(snap.jobs["c"], {Role.WORKER: 2})
    assert found is not None
    ws.assign(snap.jobs["c"], found)
    ws.release(snap.jobs["a"])
    inner.discard()
    assert _state(ws) == before
    outer.discard()
    assert _state(ws) == before and "c" not in ws.plan().allocations


def test_trials_close_innermost_first() -> None:
    ws = Workspace(snapshot(cluster(1, 4)))
    outer = ws.trial()
    ws.trial()
    try:
        outer.commit()
    except RuntimeError as exc:
        assert "innermost" in str(exc)
    else:
        raise AssertionError("closing an outer trial first must fail")


@settings(max_examples=40, deadline=None)
@given(gpus=st.lists(st.integers(0, 8), min_size=1, max_size=10),
       asks=st.lists(st.integers(1, 6), min_size=1, max_size=15))
def test_tightest_fit_as_a_scorer_picks_what_the_index_picks(gpus: list[int], asks: list[int]) -> None:
    """The generic weighted-sum path with only the tightest-fit scorer places like its indexed fast path."""
    cl = Cluster(tuple(node(f"n{i}", g, cpu=4 * max(g, 1) + i % 3) for i, g in enumerate(gpus)))
    snap = snapshot(cl)
    fast, scored = Workspace(snap), Workspace(snap, scoring=((tightest_fit, 2.0),))
    assert scored.scoring is not TIGHTEST
    for k, workers in enumerate(asks):
        view = pending(f"j{k}", workers)
        a, b = fast.find(view, {Role.WORKER: workers}), scored.find(view, {Role.WORKER: workers})
        assert a == b
        if a is not None:
            fast.assign(view, a)
            scored.assign(view, a)


def _cheap(node: Node, free: Resources, need: Resources, job: JobView) -> float:
    return -node.price_per_hour


def test_scorers_add_up_with_their_weights() -> None:
    # n0 is the tighter fit (2 GPUs left vs 3) but costs more per hour.
    cl = Cluster((node("n0", 4, price_per_hour=3.0), node("n1", 5, price_per_hour=1.0)))
    job = pending("j", 2)
    want = {Role.WORKER: 2}
    snap = snapshot(cl)
    assert Workspace(snap).find(job, want).nodes == ("n0",)  # type: ignore[union-attr]
    # tightest: n0 -2, n1 -3; price: n0 -3, n1 -1. Weighted sums pick the cheaper node once price weighs in.
    light = Workspace(snap, scoring=((tightest_fit, 1.0), (_cheap, 0.4)))  # n0 -3.2, n1 -3.4
    heavy = Workspace(snap, scoring=((tightest_fit, 1.0), (_cheap, 1.0)))  # n0 -5, n1 -4
    assert light.find(job, want).nodes == ("n0",)  # type: ignore[union-attr]
    assert heavy.find(job, want).nodes == ("n1",)  # type: ignore[union-attr]
    policy = Cycle(name="cheap", scoring=((tightest_fit, 1.0), (_cheap, 1.0)))
    assert policy.decide(snapshot(cl, job)).allocations["j"].nodes == ("n1",)


def test_never_fits_verdicts_follow_the_cluster_not_its_identity() -> None:
    """A verdict made on one cluster is not reused on another (node churn), even with equal names."""
    policy = make_policy("fifo")
    big = pending("big", 8)
    small_cluster, large_cluster = cluster(1, 4), cluster(2, 8)
    assert "big" in policy.decide(snapshot(small_cluster, big)).rejected
    plan = policy.decide(snapshot(large_cluster, big))
    assert "big" not in plan.rejected and "big" in plan.allocations
    assert policy.decide(snapshot(cluster(2, 8), big)).allocations  # an equal cluster keeps the memo


def test_no_policy_changes_its_snapshot() -> None:
    cl = cluster(2, 4)
    views = (running("a", 4, on="n0", since=0.0, attained=1e6), running("b", 2, on="n1"),
             pending("c", 4, submit=5.0, priority=5), pending("d", 2, submit=6.0))
    for name in available():
        snap = snapshot(cl, *views, now=5000.0)
        before = (copy.deepcopy(dict(snap.free)), dict(snap.jobs), snap.held, snap.now)
        make_policy(name).decide(snap)
        assert (dict(snap.free), dict(snap.jobs), snap.held, snap.now) == before, name


def test_a_blocked_job_carries_a_typed_wait_and_fragmentation_is_told_apart() -> None:
    # 4 GPUs free in total but 2 + 2 on two nodes: a 4-GPU single-task job is fragmented out, a 6-GPU one short.
    cl = cluster(2, 4)
    one_task = Resources(gpu=4)
    snap = snapshot(cl, running("a", 2, on="n0"), running("b", 2, on="n1"),
                    pending("frag", 1, per_task=one_task, submit=1.0), pending("short", 6, submit=2.0))
    plan = make_policy("drf").decide(snap)
    assert plan.waits["frag"].kind is WaitKind.FRAGMENTATION
    assert plan.waits["short"].kind is WaitKind.GANG
    assert plan.reasons["short"].startswith("gang: needs 6 GPU(s)")
    assert set(plan.waits) == {"frag", "short"}  # running jobs carry no wait
