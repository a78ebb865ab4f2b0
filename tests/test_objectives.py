"""Budget and deadline at sizing: fastest within the budget, cheapest meeting the deadline, a note when not."""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import pytest

from builders import job, node, pending, snapshot
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.core.job import Role
from trainmaster.core.spec import job_from_mapping
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.models.book import JobModel
from trainmaster.models.speed import Config, Form
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

# One 8-GPU node at $28.80 an hour: $0.001 per GPU-second.
CLUSTER = Cluster((node("n0", 8, price_per_hour=28.8),))


class SquareRoot:
    """k workers make sqrt(k) steps/s: more workers finish sooner but cost more in all."""

    def steps_per_s(self, c: Config) -> float:
        return math.sqrt(c.workers)


# 3,600 steps left: T(k) = 3600/sqrt(k) s; dollars C(k) = T(k) * k * 0.001 = 3.6 * sqrt(k).
MODEL = JobModel(job_id="j", form=Form.ALLREDUCE, batch=1.0, speed=SquareRoot(), basis="own fit", step=0.0,
                 remaining=3600.0, configs=3)


def _decide(**fields: object) -> tuple[int, Plan]:
    view = pending("j", spec=job("j", 1, min_gpus=1, max_gpus=8, **fields))
    snap = replace(snapshot(CLUSTER, view), models=MappingProxyType({"j": MODEL}))
    plan = Cycle(name="t").decide(snap)
    return plan.allocations["j"].count(Role.WORKER), plan


def test_without_objectives_the_preset_size_stands() -> None:
    assert _decide()[0] == 1


def test_the_cheapest_size_that_meets_the_deadline() -> None:
    assert _decide(deadline=2000.0)[0] == 4  # 4+ workers finish in 1,800 s or less; 4 is the cheapest of them
    assert _decide(deadline=4000.0)[0] == 1  # one worker makes it (3,600 s) at the lowest cost


def test_a_deadline_that_cannot_be_met_says_so_and_runs_at_the_fastest() -> None:
    workers, plan = _decide(deadline=1000.0)  # 8 workers, the most there is, take 1,273 s
    assert workers == 8
    assert plan.reasons["j"].startswith("deadline: predicted to finish 273 s late")


def test_the_fastest_size_within_the_budget() -> None:
    assert _decide(budget=8.0)[0] == 4  # $7.20 at 4 workers; 5 cost $8.05
    workers, plan = _decide(budget=3.0)  # even one worker costs $3.60
    assert workers == 1 and plan.reasons["j"].startswith("budget: $3.00 left")


def test_deadline_and_budget_in_the_yaml() -> None:
    def doc(**spec: object) -> dict[str, object]:
        return {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "j"},
                "spec": {"roles": {"worker": {"min": 1}}, **spec}}

    assert job_from_mapping(doc(deadline="6h", budget=12.5)).deadline == 21_600.0
    at = "2030-01-01T06:00:00+00:00"
    midnight = 1_893_456_000.0  # 2030-01-01T00:00:00Z: a job submitted then (recovered after a restart)
    assert job_from_mapping(doc(deadline=at), submitted=midnight).deadline == 21_600.0
    for bad, field in (({"deadline": "soon"}, "spec.deadline"), ({"deadline": "2001-01-01T00:00:00Z"}, "spec.deadline"),
                       ({"deadline": "2030-01-01T00:00:00"}, "spec.deadline"), ({"budget": 0}, "spec.budget"),
                       ({"budget": "lots"}, "spec.budget"), ({"requireGpuTypes": "v100"}, "spec.requireGpuTypes"),
                       ({"anchorsOnDemand": "no"}, "spec.anchorsOnDemand")):
        try:
            job_from_mapping(doc(**bad))
        except SpecError as exc:
            assert str(exc).startswith(field), str(exc)
        else:
            raise AssertionError(f"{bad} must be refused")


def test_the_budget_left_is_the_bill_so_far() -> None:
    """$8 buys 4 workers (module figures); a job that already paid $4.40 has $3.60 left: one worker."""
    spec = job("j", 1, min_gpus=1, max_gpus=8, budget=8.0)
    for spent, workers in ((0.0, 4), (4.4, 1)):
        view = replace(pending("j", spec=spec), spent=spent)
        snap = replace(snapshot(CLUSTER, view), models=MappingProxyType({"j": MODEL}))
        assert Cycle(name="t").decide(snap).allocations["j"].count(Role.WORKER) == workers


def test_a_view_reads_the_job_bill_from_the_controller_cost_meter() -> None:
    """One 1-GPU job on a $3.60/h 1-GPU node runs 1,000 s: it paid $1 when it finishes; midway, the snapshot says
    what the meter says, not GPU-seconds times a price."""
    work = Workload("t", (WorkloadJob("a", 0.0, job("a", 1), LinearTruth(1000.0, 1)),
                          WorkloadJob("b", 500.0, job("b", 1), LinearTruth(10.0, 1))))  # a decision midway
    c = Controller(SimEngine(Cluster((node("n0", 1, price_per_hour=3.6),)), work), make_policy("fifo"))
    seen: list[tuple[float, float, float]] = []
    c.after_cycle.append(lambda snap, plan: seen.extend(
        (snap.now, v.spent, c.cost.job_cost(v.id, snap.now)) for v in snap.jobs.values() if v.id == "a"))
    c.run()
    assert all(abs(spent - meter) < 1e-9 for _, spent, meter in seen)
    assert any(t == 500.0 and spent > 0.4 for t, spent, _ in seen)  # $0.001/s for the 500 s `a` held the node
    assert c.cost.job_cost("a", c.jobs["a"].finish_time or 0.0) == pytest.approx(1.0, rel=1e-2)
