"""optimus answers a decision whose snapshot moved nothing it reads with its last plan (`Optimus.skip_unmoved`):
replayed with the switch on and off, every plan, its allocations and waits in order, and the waits shared alike."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import on_and_off
from tests.test_model_groups import _philly

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import Workload
from trainmaster.workloads.ps_truth import ps_workload


class _Kept:
    """The optimus preset as the controller drives it (`Optimus.decide`, not its cycle's), keeping every plan."""

    def __init__(self) -> None:
        self.optimus = Optimus()
        self.name, self.interval, self.uses_models = "optimus", self.optimus.interval, True
        self.reads_few_jobs = self.optimus.reads_few_jobs
        self.plans: list[Plan] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.optimus.decide(snapshot)
        self.plans.append(plan)
        return plan


def _replay(workload: Workload, cluster: str) -> list[Plan]:
    kept = _Kept()
    engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
    Controller(engine, kept).run()
    return kept.plans


def _sharing(plan: Plan) -> list[int]:
    """Which earlier wait each of the plan's waits is (the same object), in order."""
    first: dict[int, int] = {}
    return [first.setdefault(id(w), k) for k, w in enumerate(plan.waits.values())]


def _sized(deadline: float | None = None) -> Workload:
    """PS jobs with loss targets: their models predict, so sizes follow models that move between decisions."""
    jobs = ps_workload(40, rate_per_hour=60, seed=3)
    if deadline is None:
        return jobs
    return replace(jobs, jobs=tuple(replace(j, spec=replace(j.spec, deadline=deadline)) for j in jobs.jobs))


def _same(workload: Workload, cluster: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], list[bool]]:
    """On and off plan alike, the waits shared alike; each decision's `_unmoved` answer, on and off."""
    fast, slow = on_and_off(monkeypatch, lambda: _replay(workload, cluster), (Optimus, "skip_unmoved"),
                            spies={"unmoved": (Optimus, "_unmoved"), "cycles": (Optimus, "size")})
    for a, b in zip(fast.plans, slow.plans, strict=True):
        assert _sharing(a) == _sharing(b)
    assert not slow.calls["unmoved"]  # (the reference decides every time)
    assert len(fast.calls["cycles"]) == len(slow.calls["cycles"]) - fast.calls["unmoved"].count(True)
    return fast.calls["unmoved"], slow.calls["unmoved"]


def test_philly_quiet_ticks_answered_with_the_last_plan(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Philly's first jobs on 4x8 (no model predicts: every job at its minimum, a line of waiting jobs): the
    interval's decisions between events are answered with the last plan, the same plans as deciding anew."""
    unmoved, _ = _same(_philly(shared_data), "4x8", monkeypatch)
    assert unmoved.count(True) > 20 and False in unmoved


def test_moving_models_decide_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """PS jobs whose models predict and move between decisions (loss targets): a quiet tick with a model
    republished decides anew; the same plans either way."""
    unmoved, _ = _same(_sized(), "2x4", monkeypatch)
    assert unmoved.count(False) > 20


def test_deadlines_decide_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs with a deadline (the objectives read the clock): never answered with the last plan."""
    unmoved, _ = _same(_sized(deadline=4000.0), "2x4", monkeypatch)
    assert True not in unmoved
