"""Reservation for the blocked head job, backfill that cannot delay it, against no backfill and greedy skipping."""

from __future__ import annotations

import pytest

from builders import cluster, pending, running, snapshot
from queue_builders import J, simulate
from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.policies.backfill import earliest_start, predict_starts, predicted_finishes, predicted_remaining
from trainmaster.policies.trainmaster import Backfill, build
from trainmaster.policies.workspace import Workspace


def est(seconds: float, **more: object) -> dict[str, object]:
    return {"estimate": seconds, **more}


# a holds 4 of 8 GPUs until 1000; b (8 GPUs) is the blocked head; c ends before b could start; d would delay b.
SCENARIO = (J("a", 4, 0, 1000, fields=est(1000)), J("b", 8, 10, 500, fields=est(500)),
            J("c", 2, 20, 100, fields=est(100)), J("d", 2, 30, 5000, fields=est(5000)))


@pytest.mark.parametrize(("mode", "starts"), [
    ("reserve", {"a": 0, "b": 1000, "c": 20, "d": 1500}),  # c backfills, d waits: b starts on time
    ("greedy", {"a": 0, "b": 5030, "c": 20, "d": 30}),  # d skips ahead and starves b until it ends
    ("none", {"a": 0, "b": 1000, "c": 1500, "d": 1500}),  # nothing passes b: 4 GPUs idle for 980 s
])
def test_head_job_start_under_each_backfill_mode(mode: Backfill, starts: dict[str, float]) -> None:
    run = simulate("2x4", build(mode, backfill=mode, elastic=False), *SCENARIO)
    assert run.starts() == starts


def test_the_reason_names_the_reservation() -> None:
    run = simulate("2x4", build("t", elastic=False), *SCENARIO, until=40)
    assert run.controller.last_plan.eta["b"] == 1000
    assert "reserved n0,n1 from t=1000" in run.record("b").why
    assert run.record("d").why.startswith("reservation: would delay b")
    assert "backfilled" in run.record("c").why


def test_a_long_job_backfills_when_it_keeps_off_the_reserved_nodes() -> None:
    # 3 nodes of 4: a holds n0 until 1000, x holds 2 GPUs of n1 for ever (no estimate). b needs 8: it is
    # reserved n0+n2 from t=1000. A long job may still take n1's 2 free GPUs: that cannot delay b.
    jobs = (J("a", 4, 0, 1000, fields=est(1000)), J("x", 2, 0, 10_000), J("b", 8, 10, 500, fields=est(500)),
            J("long", 2, 20, 5000, fields=est(5000)))
    run = simulate("3x4", build("t", elastic=False), *jobs, until=40)
    assert run.starts()["long"] == 20
    assert "keeps off the reserved nodes" in run.record("long").why
    assert run.record("long").allocation.nodes == ("n1",)
    run.controller.run()
    assert run.starts()["b"] == 1000


def test_without_estimates_nothing_is_reserved_or_backfilled() -> None:
    jobs = (J("a", 4, 0, 1000), J("b", 8, 10, 500), J("c", 2, 20, 100, fields=est(100)))
    run = simulate("2x4", build("t", elastic=False), *jobs, until=40)
    assert "no predicted start" in run.record("b").why
    assert run.starts().keys() == {"a"}


def test_predictions_use_the_estimate_scaled_by_held_gpus() -> None:
    snap = snapshot(cluster(1, 8), running("e", 4, min_gpus=2, max_gpus=8, attained=400.0, estimate=1000.0),
                    now=100.0)
    # 1000 s at its minimum of 2 GPUs = 2000 GPU-s of work; 400 done; 1600 left on 4 GPUs = 400 s.
    assert predicted_remaining(snap.jobs["e"], snap) == pytest.approx(400.0)
    assert predicted_finishes(snap, Workspace(snap)) == {"e": pytest.approx(500.0)}
    assert predicted_remaining(pending("p", 2), snap) is None


def test_model_prediction_wins_over_the_estimate() -> None:
    class Model:
        def remaining_time(self, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
            return 1234.0 / workers

    snap = snapshot(cluster(1, 8), running("e", 2, estimate=10.0), now=0.0)
    snap = type(snap)(now=0.0, cluster=snap.cluster, jobs=snap.jobs, free=snap.free, models={"e": Model()})
    assert predicted_remaining(snap.jobs["e"], snap) == pytest.approx(617.0)


def test_earliest_start_waits_for_enough_predicted_finishes() -> None:
    snap = snapshot(cluster(2, 4), running("a", 4, on="n0", estimate=300.0),
                    running("b", 4, on="n1", estimate=900.0), pending("c", 6), now=0.0)
    ws = Workspace(snap)
    want = {Role.WORKER: 6}
    t, alloc = earliest_start(snap, ws, snap.jobs["c"], want, predicted_finishes(snap, ws)) or (None, Allocation())
    assert t == pytest.approx(900.0) and alloc.gpus(snap.jobs["c"].spec) == 6
    assert earliest_start(snap, ws, snap.jobs["c"], want, {"a": 300.0, "b": None}) is None


def test_predict_starts_is_conservative_backfill_on_aggregate_capacity() -> None:
    snap = snapshot(cluster(1, 8), running("a", 6, estimate=100.0), now=0.0)
    order = [pending("p8", 8, estimate=50.0), pending("q2", 2, estimate=40.0), pending("r2", 2, estimate=500.0),
             pending("u", 1)]
    got = predict_starts(snap, {"a": snap.jobs["a"].allocation}, order)
    # p8 after a (100); q2 fits now and ends by 40; r2 would overlap p8, so after it (150); u has no estimate:
    # it takes one GPU for ever from the first moment one is free for good (after r2 starts: 150 leaves 6 free).
    assert got == {"p8": 100.0, "q2": 0.0, "r2": 150.0, "u": 150.0}
    assert predict_starts(snap, {"a": snap.jobs["a"].allocation}, [pending("big", 9)]) == {"big": None}


def test_reserve_after_starts_greedily_until_the_head_has_waited_that_long() -> None:
    # b (the head) is reserved for only from t=10+500: d skips ahead at t=30 as with greedy skipping, and
    # later jobs cannot pass b once its reservation holds.
    jobs = (*SCENARIO, J("e", 2, 600, 5000, fields=est(5000)))
    run = simulate("2x4", build("t", elastic=False, reserve_after=500.0), *jobs)
    starts = run.starts()
    assert starts["c"] == 20 and starts["d"] == 30
    assert starts["b"] == 5030  # d held 2 GPUs until 5030: b waited for it
    assert starts["e"] >= starts["b"]  # e arrived after b's reservation began: it could not pass
