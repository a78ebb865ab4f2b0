"""A report's fields (`step`, `loss`, `steps_per_s`) read live by the controller's views: a report rebuilds no
view, and the trainmaster preset plans exactly as with a view rebuilt per report (`JobRecord.live_progress`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.replay_helpers import on_and_off, spy
from tests.test_trainmaster_philly_paths import trainmaster_philly_plans

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import Role, simple_job
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


def test_live_progress_plans_as_a_view_per_report(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    """The same plans with the report's fields read live as with a view rebuilt at every report, and far
    fewer views built."""
    fast, slow = on_and_off(monkeypatch, lambda: trainmaster_philly_plans(shared_data), (JobRecord, "live_progress"),
                            spies={"views": (JobRecord, "live_view", lambda view, *args: view)}, least=20)
    assert 0 < 3 * len(fast.calls["views"]) < 2 * len(slow.calls["views"])  # (307 and 527 views built)


def _controller() -> tuple[Controller, str]:
    """A controller on 1x4 with one job started on it (its view built)."""
    job = WorkloadJob("a", 0.0, simple_job("a", gpus=1), LinearTruth(duration=1000.0, gpus=1))
    controller = Controller(SimEngine(parse_shorthand("1x4"), Workload(name="one", jobs=(job,))), make_policy("fifo"))
    assert controller.step() and controller.jobs["a"].allocation  # (arrived, started)
    return controller, "a"


@pytest.mark.parametrize("live", [True, False])
def test_a_view_reads_the_latest_report(monkeypatch: pytest.MonkeyPatch, live: bool) -> None:
    """Live: the next snapshot's view is the same object and reads the report's fields; the reference: a new view
    with them. Either way the record has them, the sinks and listeners heard the report, no decision is due."""
    monkeypatch.setattr(JobRecord, "live_progress", live)
    controller, jid = _controller()
    before = controller.snapshot().jobs[jid]
    heard: list[str] = []
    sunk: list[Report] = []
    controller.listeners.append(lambda what, record: heard.append(what))
    controller.report_sinks.append(lambda report, record: sunk.append(report))
    alloc = controller.jobs[jid].allocation
    report = Report(time=5.0, job_id=jid, step=42, loss=0.5, steps_per_s=3.0, allocation=alloc)
    controller.handle(report)
    assert not controller._dirty and heard == ["report"] and sunk == [report]
    record = controller.jobs[jid]
    assert (record.step, record.loss, record.steps_per_s) == (42, 0.5, 3.0)
    controller.handle(Report(time=6.0, job_id=jid, step=43, loss=None, steps_per_s=None, allocation=alloc))
    assert (record.step, record.loss, record.steps_per_s) == (43, 0.5, 3.0)  # (None keeps the last ones)
    view = controller.snapshot().jobs[jid]
    assert (view is before) is live
    assert (view.step, view.loss, view.steps_per_s) == (43, 0.5, 3.0)
    assert (before.step, before.loss) == ((43, 0.5) if live else (0, None))  # (a kept view: the latest if live)


def test_another_field_still_rebuilds_the_view() -> None:
    """A viewed field other than a report's (here the allocation) still makes the next snapshot's view new."""
    controller, jid = _controller()
    before = controller.snapshot().jobs[jid]
    record = controller.jobs[jid]
    record.last_checkpoint = 7.0
    after = controller.snapshot().jobs[jid]
    assert after is not before and after.last_checkpoint == 7.0
    record.allocation = Allocation.of([Placement(Role.WORKER, "n0")])
    assert controller.snapshot().jobs[jid] is not after


def test_a_report_for_a_gone_job_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report of a job not live (ended, or never seen) reaches no sink."""
    controller, _ = _controller()
    sunk = spy(monkeypatch, JobRecord, "progressed")
    controller.handle(Report(time=1.0, job_id="nobody", step=1))
    assert sunk == []
