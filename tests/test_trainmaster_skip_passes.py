"""The trainmaster preset's passes skipped when their inputs did not change plan exactly as running them.

Each switch is turned off in turn and a small contended workload replayed (24 PS jobs on 3x4, the first 8 and
every third one fixed at their minimum, the rest elastic, models learning online): every plan, its allocation
order and its waits must be equal, and the skip must have been taken at some decisions and not at others.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from tests.replay_helpers import on_and_off, preset_plans

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.job import Role, simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.policies.backfill import Kept, predicted_finishes
from trainmaster.policies.fairshare import FairPlace
from trainmaster.policies.snapshot import JobView, Plan
from trainmaster.workloads.ps_truth import ps_workload


def replay() -> list[Plan]:
    """Every plan of the trainmaster preset on the module doc's workload."""
    base = ps_workload(24, rate_per_hour=40, seed=3)
    jobs = tuple(replace(j, spec=replace(j.spec, roles={r: replace(s, max=s.min) for r, s in j.spec.roles.items()}))
                 if i < 8 or i % 3 == 0 else j for i, j in enumerate(base.jobs))
    return preset_plans("trainmaster", replace(base, jobs=jobs), "3x4",
                        SimConfig(report_interval=LEARNING_REPORT_INTERVAL), all_finish=True)


def test_running_pass_skipped_plans_as_walking_every_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """`FairPlace.skip_kept`: the running-jobs pass only when some holder's size differs from what it holds."""
    fast, slow = on_and_off(monkeypatch, replay, (FairPlace, "skip_kept"), spies={"resize": (FairPlace, "_any_resize")})
    verdicts = fast.calls["resize"]
    assert not slow.calls["resize"]  # (the reference never asks)
    assert len(verdicts) == len(fast.plans) and 0 < sum(verdicts) < len(verdicts)  # skipped at some, not all


def test_a_new_size_for_the_same_allocation_is_checked_again() -> None:
    """An equal verdict is kept per (allocation, size) pair: a new size for an unchanged holder (the greedy's
    shrink) is compared again, and an unequal pair is never kept."""
    place = FairPlace(strict=True)
    snap = SimpleNamespace(jobs={"a": None, "b": None})
    held = {"a": Allocation.of(Placement(Role.WORKER, "n0") for _ in range(2)),
            "b": Allocation.of([Placement(Role.WORKER, "n1")])}
    sizes = {"a": {Role.WORKER: 2}, "b": {Role.WORKER: 1}}
    check = place._any_resize
    assert not check(snap, held, sizes)  # type: ignore[arg-type]
    assert not check(snap, held, sizes)  # type: ignore[arg-type]  # (kept: read in line)
    assert check(snap, held, {**sizes, "a": {Role.WORKER: 1}})  # type: ignore[arg-type]
    shrink = {"a": {Role.WORKER: 1}, "b": sizes["b"]}
    assert check(snap, held, shrink) and check(snap, held, shrink)  # type: ignore[arg-type]


def test_kept_prediction_read_in_line_only_for_the_same_allocation() -> None:
    """`predicted_finishes` reads a kept answer in line only while the holder's model and allocation are
    the objects it was asked about: a new allocation (a resize, a restart) or model asks the model again."""

    class Model:
        def __init__(self, per_worker: float) -> None:
            self.per_worker = per_worker

        def remaining_time(self, workers: int, ps: int = 0, nodes: int = 1) -> float:
            return self.per_worker / workers

    spec = simple_job("a", 2)
    one, two = (Allocation.of(Placement(Role.WORKER, "n0") for _ in range(k)) for k in (1, 2))
    view = JobView(id="a", spec=spec, state=JobState.RUNNING, submit_time=0.0, allocation=two)
    model = Model(100.0)
    snap = SimpleNamespace(jobs={"a": view}, models={"a": model}, now=10.0)
    kept: Kept = {}
    ws = SimpleNamespace(allocations={"a": two})
    assert predicted_finishes(snap, ws, kept) == {"a": 60.0} == predicted_finishes(snap, ws)  # type: ignore[arg-type]
    assert kept["a"] == (model, two, 50.0)
    ws.allocations = {"a": one}  # the same model, another allocation
    assert predicted_finishes(snap, ws, kept) == {"a": 110.0}  # type: ignore[arg-type]
    snap.models = {"a": Model(40.0)}  # the same allocation, another model
    assert predicted_finishes(snap, ws, kept) == {"a": 50.0}  # type: ignore[arg-type]
