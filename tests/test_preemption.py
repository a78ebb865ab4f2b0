"""Priority preemption, minimum runtime, checkpoint-aware victims, services, reclaim limits, gang without deadlock."""

from __future__ import annotations

import pytest

from builders import running
from queue_builders import J, queue, queues, simulate
from trainmaster.core.job import JobKind
from trainmaster.core.states import JobState
from trainmaster.policies.preemption import since_checkpoint, work_lost
from trainmaster.policies.trainmaster import build


def policy(min_runtime: float = 600.0):  # type: ignore[no-untyped-def]
    return build("t", elastic=False, min_runtime=min_runtime, interval=50.0)


def test_higher_priority_preempts_lower_in_the_same_queue_and_the_victim_resumes() -> None:
    run = simulate("1x8", policy(), J("low", 8, at=0, duration=1000), J("high", 8, at=700, duration=300,
                                                                           fields={"priority": 10}))
    assert run.starts()["high"] == 700
    assert run.events("preempted") == [(700, "low")]
    low = run.record("low")
    assert low.preemptions == 1 and low.restarts == 0 and low.state is JobState.SUCCEEDED
    assert low.finish_time == pytest.approx(1000 + 300)  # resumed from its checkpoint: only the wait was lost
    assert any("preempted by high" in text for _, text in low.decisions)


def test_equal_priority_never_preempts() -> None:
    run = simulate("1x8", policy(), J("a", 8, duration=1000), J("b", 8, at=700, duration=300))
    assert run.events("preempted") == [] and run.starts()["b"] == 1000


def test_no_preemption_before_the_minimum_runtime() -> None:
    run = simulate("1x8", policy(min_runtime=600), J("low", 8, duration=5000),
                   J("high", 8, at=100, duration=300, fields={"priority": 10}))
    (t, victim), = run.events("preempted")
    assert victim == "low" and 600 <= t < 700  # the next cycle (every 50 s) after low ran 600 s


def test_victim_is_the_job_that_loses_least_work_since_its_checkpoint() -> None:
    # Both run since t=0; "rare" checkpoints every 1000 s (700 s lost at t=700), "often" every 300 s (100 s lost).
    jobs = (J("rare", 4, duration=5000, fields={"checkpoint_every": 1000.0}),
            J("often", 4, duration=5000, fields={"checkpoint_every": 300.0}),
            J("high", 4, at=700, duration=100, fields={"priority": 5}))
    run = simulate("1x8", policy(), *jobs)
    assert run.events("preempted") == [(700, "often")]


def test_work_lost_counts_periodic_checkpoints() -> None:
    view = running("a", 4, since=0.0, checkpoint_every=300.0)
    assert since_checkpoint(view, 700.0) == pytest.approx(100.0)
    assert work_lost(view, 700.0) == pytest.approx(400.0)


def test_priority_does_not_preempt_across_queues_within_quota() -> None:
    qs = queues(queue("a", gpu=4), queue("b", gpu=4))
    jobs = (J("a0", 4, duration=5000, fields={"queue": "a"}), J("b0", 4, duration=5000, fields={"queue": "b"}),
            J("b-high", 4, at=700, duration=100, fields={"queue": "b", "priority": 9}))
    run = simulate("1x8", policy(), *jobs, qs=qs)
    assert run.events("preempted") == [(700, "b0")]  # its own queue's lower-priority job, never a0
    assert run.record("a0").preemptions == 0


def test_reclaim_takes_only_borrowed_capacity() -> None:
    # a runs all 8 GPUs as 6+2 (quota 4: 4 borrowed); b wants 4. Evicting the 6-GPU job would take a below its
    # quota and evicting the 2-GPU one is not enough, so nothing is evicted and b waits.
    qs = queues(queue("a", gpu=4), queue("b", gpu=4))
    jobs = (J("a0", 6, duration=5000, fields={"queue": "a"}), J("a1", 2, duration=5000, fields={"queue": "a"}),
            J("b0", 4, at=700, duration=100, fields={"queue": "b"}))
    run = simulate("1x8", policy(), *jobs, qs=qs)
    assert run.events("preempted") == []
    assert run.starts()["b0"] == 5000
    assert any(text.startswith("gang:") for _, text in run.record("b0").decisions)


def test_a_service_starts_at_once_evicting_training_even_before_min_runtime() -> None:
    service = {"kind": JobKind.SERVICE, "priority": 100}
    run = simulate("1x8", policy(min_runtime=3600), J("train", 8, duration=1000),
                   J("web", 4, at=10, duration=100, fields=service))
    assert run.starts()["web"] == 10
    assert run.events("preempted") == [(10, "train")]


def test_gangs_each_needing_most_of_the_cluster_never_deadlock() -> None:
    # Three 6-GPU gangs on 8 GPUs: none holds a part while waiting; they run one after another.
    run = simulate("2x4", policy(), *(J(f"g{i}", 6, duration=100) for i in range(3)))
    assert sorted(run.starts().values()) == [0, 100, 200]
    assert all(r.state is JobState.SUCCEEDED for r in run.controller.jobs.values())
    assert all(gpus in (0, 6) for _, what, _, gpus in run.log if what in ("start", "running"))
