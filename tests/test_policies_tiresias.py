"""Scenario tables for `tiresias`: 2 queues by attained service, FIFO inside, preemption, starvation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, linear_workload, pending, preempted, running, snapshot, started
from trainmaster.controller.loop import Controller
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.tiresias import THRESHOLD, make
from trainmaster.policies.waits import WaitKind

# (name, nodes x gpus, jobs, expected started, expected preempted)
CASES = [
    ("empty cluster starts everything that fits", (2, 4),
     [pending("a", 4, submit=0), pending("b", 2, submit=1), pending("c", 2, submit=2)], {"a", "b", "c"}, set()),
    ("Q0 is FIFO: a later Q0 job does not preempt an earlier one", (1, 4),
     [running("a", 4, attained=100.0), pending("b", 4, submit=5)], set(), set()),
    ("a fresh Q0 job preempts a Q1 job", (1, 4),
     [running("old", 4, attained=THRESHOLD + 1), pending("new", 4, submit=5)], {"new"}, {"old"}),
    ("work-conserving: a blocked big job does not hold back a small one", (2, 4),
     [running("a", 4, attained=10.0), pending("big", 8, submit=1), pending("small", 2, submit=2)],
     {"small"}, set()),
    ("no useless eviction: the big Q0 job cannot fit even by preempting the Q1 job", (2, 4),
     [running("q0", 4, on="n0", attained=10.0), running("q1", 2, on="n1", attained=THRESHOLD * 2),
      pending("big", 8, submit=1)], set(), set()),
    ("the lowest-ranked job is the victim, and only as many as needed", (1, 4),
     [running("early", 2, attained=THRESHOLD * 3, submit=0, since=0),
      running("late", 2, attained=THRESHOLD * 1.5, submit=1, since=0), pending("new", 2, submit=9)],
     {"new"}, {"late"}),
]


@pytest.mark.parametrize(("name", "shape", "jobs", "want_started", "want_preempted"), CASES,
                         ids=[c[0] for c in CASES])
def test_tiresias_scenarios(name: str, shape: tuple[int, int], jobs: list, want_started: set[str],
                            want_preempted: set[str]) -> None:
    snap = snapshot(cluster(*shape), *jobs, now=100_000.0)
    plan = make().decide(snap)
    assert started(plan, snap) == want_started
    assert preempted(plan, snap) == want_preempted


def test_demotes_a_job_that_crosses_the_threshold() -> None:
    policy = make(threshold=1000.0)
    order = policy.order
    cl = cluster(1, 4)
    # t=0: `a` starts alone on 4 GPUs.
    snap0 = snapshot(cl, pending("a", 4), now=0.0)
    assert started(policy.decide(snap0), snap0) == {"a"}
    # t=200: 800 GPU-s attained, still Q0; a new Q0 job waits behind it (FIFO).
    snap1 = snapshot(cl, running("a", 4, attained=800.0), pending("b", 4, submit=150.0), now=200.0)
    plan1 = policy.decide(snap1)
    assert order.queue_of("a") == 0  # type: ignore[attr-defined]
    assert started(plan1, snap1) == set() and preempted(plan1, snap1) == set()
    # t=260: 1040 GPU-s crossed the 1000 threshold -> Q1, and the waiting Q0 job preempts it.
    snap2 = snapshot(cl, running("a", 4, attained=1040.0), pending("b", 4, submit=150.0), now=260.0)
    plan2 = policy.decide(snap2)
    assert order.queue_of("a") == 1  # type: ignore[attr-defined]
    assert started(plan2, snap2) == {"b"} and preempted(plan2, snap2) == {"a"}
    assert plan2.waits["a"].kind is WaitKind.PRIORITY and "preempted by b" in plan2.reasons["a"]


@pytest.mark.parametrize(("starvation", "promoted"), [(2.0, True), (None, False)])
def test_promotes_a_starved_job(starvation: float | None, promoted: bool) -> None:
    policy = make(threshold=1000.0, starvation=starvation)
    order = policy.order
    cl = cluster(1, 2)
    # t=1000: `a` crosses the threshold and is preempted by a fresh Q0 job `b`;
    # `d` has long been in Q1 and entered it before `a`, so it keeps running.
    snap1 = snapshot(cl, running("a", 1, attained=1000.0, runtime=1000.0),
                     running("d", 1, attained=5000.0, runtime=5000.0, submit=-5000.0),
                     pending("b", 1, submit=500.0), now=1000.0)
    plan1 = policy.decide(snap1)
    assert preempted(plan1, snap1) == {"a"} and started(plan1, snap1) == {"b"}
    # t=3100: `a` has waited 2100 s > 2 x its 1000 s executed time; a Q0 job `c` runs now.
    snap2 = snapshot(cl, pending("a", 1, attained=1000.0, runtime=1000.0),
                     running("d", 1, attained=7100.0, runtime=7100.0, submit=-5000.0),
                     running("c", 1, attained=600.0, runtime=600.0, submit=2500.0, since=2500.0), now=3100.0)
    plan2 = policy.decide(snap2)
    assert order.queue_of("a") == (0 if promoted else 1)  # type: ignore[attr-defined]
    assert started(plan2, snap2) == ({"a"} if promoted else set())
    assert preempted(plan2, snap2) == ({"d"} if promoted else set())


def test_forgets_finished_jobs() -> None:
    policy = make()
    cl = cluster(1, 4)
    policy.decide(snapshot(cl, running("a", 4), now=10.0))
    policy.decide(snapshot(cl, pending("b", 1), now=20.0))
    assert policy.order.queue_of("a") is None  # type: ignore[attr-defined]


def test_wakes_up_when_a_waiting_job_could_overtake() -> None:
    policy = make(threshold=1000.0, interval=60.0)
    cl = cluster(1, 4)
    # A job waits: wake when the runner crosses the threshold, (1000 - 200) / 4 GPUs = 200 s from now.
    plan = policy.decide(snapshot(cl, running("a", 4, attained=200.0), pending("b", 4, submit=5.0), now=50.0))
    assert plan.wake_after == 200.0
    # Never sooner than the 60 s tick.
    plan = policy.decide(snapshot(cl, running("a", 4, attained=960.0), pending("b", 4, submit=5.0), now=240.0))
    assert plan.wake_after == 60.0
    # Nobody waits: no periodic decision at all; the next event brings the next one.
    plan = policy.decide(snapshot(cl, running("a", 4, attained=2000.0), now=500.0))
    assert plan.wake_after is None and policy.interval is None  # the policy itself never changes


def test_demotion_and_preemption_in_a_simulated_run() -> None:
    """Through the real controller and sim engine: a long job is demoted, a short one overtakes it."""
    workload = linear_workload([("long", 0.0, 4, 10_000.0), ("short", 100.0, 4, 500.0)])
    engine = SimEngine(cluster(1, 4), workload, SimConfig(restart_delay=30.0))
    controller = Controller(engine, make(threshold=4000.0), check=True)  # 1,000 s on 4 GPUs
    controller.run()
    long, short = controller.jobs["long"], controller.jobs["short"]
    assert short.first_start == pytest.approx(1000.0)  # exactly when `long` crossed the threshold
    assert short.finish_time == pytest.approx(1500.0)
    assert long.preemptions == 1 and short.preemptions == 0
    assert long.restarts == short.restarts == 0  # preempted, never failed
    # `long` lost 500 s to `short` and 30 s to its restart.
    assert long.finish_time == pytest.approx(10_000.0 + 500.0 + 30.0)
    assert long.state is short.state is JobState.SUCCEEDED


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.sampled_from([0.0, 500.0, 5000.0])),
                min_size=1, max_size=10))
def test_shortcuts_decide_as_the_full_cycle_does(rows: list[tuple[int, bool, float]]) -> None:
    """Tiresias skips work when nothing waits or everything pending fits; the plan must not change."""
    cl = cluster(3, 4)
    free = {n.name: 4 for n in cl.nodes}
    jobs = []
    for i, (gpus, run, attained) in enumerate(rows):
        spot = next((name for name, left in free.items() if left >= gpus), None) if run else None
        if spot is not None:
            free[spot] -= gpus
            jobs.append(running(f"j{i}", gpus, on=spot, submit=float(i), attained=attained))
        else:
            jobs.append(pending(f"j{i}", gpus, submit=float(i)))
    snap = snapshot(cl, *jobs, now=10_000.0)
    fast, full = make(threshold=1000.0), make(threshold=1000.0)
    assert fast.decide(snap).allocations == Cycle.decide(full, snap).allocations
