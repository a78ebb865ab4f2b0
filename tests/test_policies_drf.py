"""Scenario tables for `drf` (and `fifo` beside it): progressive filling by dominant share, gang, no preemption."""

from __future__ import annotations

import pytest

from builders import cluster, gpus_used, pending, preempted, running, snapshot, started
from trainmaster.core.job import Role
from trainmaster.policies import drf, fifo
from trainmaster.policies.waits import WaitKind

CASES = [
    # policy, description, cluster, jobs, started, preempted
    ("drf", "the queue with the lower dominant share goes first", (2, 4),
     [running("a1", 4, on="n0", queue="a"), running("c1", 2, on="n1", queue="c"),
      pending("a2", 2, submit=1, queue="a"), pending("b1", 2, submit=2, queue="b")],
     {"b1"}, set()),
    ("fifo", "(beside it: fifo serves the earlier submit)", (2, 4),
     [running("a1", 4, on="n0", queue="a"), running("c1", 2, on="n1", queue="c"),
      pending("a2", 2, submit=1, queue="a"), pending("b1", 2, submit=2, queue="b")],
     {"a2"}, set()),
    ("drf", "work-conserving: a queue's blocked job lets another queue's job start", (2, 4),
     [running("a1", 4, on="n0", queue="a"), pending("a2", 2, submit=1, queue="a"),
      pending("b1", 2, submit=2, queue="b"), pending("b2", 4, submit=3, queue="b")],
     {"b1", "a2"}, set()),
    ("drf", "inside a queue: lower job share, then submit order", (1, 4),
     [pending("x", 2, submit=5), pending("y", 2, submit=1), pending("z", 2, submit=3)], {"y", "z"}, set()),
    ("drf", "never preempts: a starved queue waits for a running job", (1, 4),
     [running("a1", 4, queue="a"), pending("b1", 1, submit=1, queue="b")], set(), set()),
    ("drf", "gang: a job that does not fit whole does not start, smaller ones do", (2, 4),
     [running("r", 3, on="n0"), running("s", 3, on="n1"), pending("g", 4, submit=1),
      pending("t", 1, submit=2), pending("u", 1, submit=3)], {"t", "u"}, set()),
    ("fifo", "strict order: the blocked head holds back smaller jobs", (2, 4),
     [running("r", 3, on="n0"), running("s", 3, on="n1"), pending("g", 4, submit=1),
      pending("t", 1, submit=2)], set(), set()),
    ("fifo", "strict order starts the prefix that fits", (1, 4),
     [pending("a", 2, submit=0), pending("b", 2, submit=1), pending("c", 1, submit=2)], {"a", "b"}, set()),
]


@pytest.mark.parametrize(("policy", "name", "shape", "jobs", "want_started", "want_preempted"), CASES,
                         ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_scenarios(policy: str, name: str, shape: tuple[int, int], jobs: list, want_started: set[str],
                   want_preempted: set[str]) -> None:
    snap = snapshot(cluster(*shape), *jobs, now=100.0)
    plan = (drf if policy == "drf" else fifo).make().decide(snap)
    assert started(plan, snap) == want_started
    assert preempted(plan, snap) == want_preempted
    assert all(used <= 4 for used in gpus_used(plan, snap).values())


def test_elastic_jobs_share_idle_capacity_max_min_fairly() -> None:
    snap = snapshot(cluster(1, 8), pending("e1", 1, min_gpus=1, max_gpus=8, submit=0),
                    pending("e2", 1, min_gpus=1, max_gpus=8, submit=1),
                    pending("e3", 2, min_gpus=2, max_gpus=2, submit=2), now=0.0)
    plan = drf.make().decide(snap)
    counts = {jid: a.count(Role.WORKER) for jid, a in plan.allocations.items()}
    assert counts == {"e1": 3, "e2": 3, "e3": 2}


def test_elastic_growth_stops_at_max_and_leaves_the_rest_idle() -> None:
    snap = snapshot(cluster(1, 8), pending("e", 1, min_gpus=1, max_gpus=3), now=0.0)
    plan = drf.make().decide(snap)
    assert plan.allocations["e"].count(Role.WORKER) == 3


def test_blocked_job_gets_a_gang_reason() -> None:
    snap = snapshot(cluster(1, 4), running("r", 3), pending("g", 2, submit=1), now=5.0)
    plan = drf.make().decide(snap)
    assert "g" not in plan.allocations
    assert plan.waits["g"].kind is WaitKind.GANG and plan.reasons["g"].startswith("gang: needs 2 GPU(s)")
