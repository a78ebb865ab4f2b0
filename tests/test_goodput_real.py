"""Batch-size adaptation for real: two jobs that opt in train on the local engine at the batch the scheduler chose.

The `trainmaster` preset decides each adaptive job's global batch with its
allocation; the engine starts the job with it (`TM_BATCH_SIZE`, and a declared
local cap as `TM_LOCAL_MAX`, which the trainer accumulates micro-batches under); the job scales
its learning rate, measures its gradient noise and reports both. The test
reads the batch back from the jobs' own reports, checks the scheduler learned
their noise scale from them, and that both reach their loss target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec
from trainmaster.core.spec import job_from_mapping
from trainmaster.core.states import JobState
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.engines.local.machine import local_cluster
from trainmaster.policies.registry import make_policy

pytestmark = pytest.mark.slow  # real processes

ROOT = Path(__file__).resolve().parents[1]
LOSS_TARGET = 0.35  # digits cross-entropy starts near ln 10 = 2.3


def adaptive_job(name: str, local_max: int | None = None) -> JobSpec:
    batch: dict[str, int] = {"min": 32, "max": 256, "base": 32}
    if local_max is not None:
        batch["localMax"] = local_max
    return job_from_mapping({
        "apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"command": ["python", "tests/jobs/adaptive_trainer.py", "--steps", "4000"],
                 "roles": {"worker": {"min": 1, "max": 1, "resources": {"cpu": "1"}}},
                 "target": {"loss": LOSS_TARGET}, "checkpoint": {"every": "5s"}, "maxRestarts": 2,
                 "adaptiveBatch": batch}})


def test_two_adaptive_jobs_train_at_the_batch_the_scheduler_chose(tmp_path: Path) -> None:
    engine = LocalEngine(local_cluster(2, cpus_per_node=1), run_dir=tmp_path / "run", base_dir=ROOT, grace=15)
    actions: list[Action] = []
    apply = engine.apply

    def record(batch: Sequence[Action]) -> None:
        actions.extend(batch)
        apply(batch)

    engine.apply = record  # type: ignore[method-assign]
    ctl = Controller(engine, make_policy("trainmaster"), check=True)
    reports: list[Report] = []
    noise_seen: list[float] = []

    def seen(report: Report, _record: object) -> None:
        reports.append(report)
        learner = learning.book.learners.get(report.job_id)
        phi = learner.noise.phi if learner is not None and learner.noise is not None else None
        if phi is not None and math.isfinite(phi):
            noise_seen.append(phi)

    learning = next(s for s in ctl.report_sinks if isinstance(s, Learning))
    ctl.report_sinks.append(seen)
    try:
        # b declares a local cap: the engine passes it (TM_LOCAL_MAX) and the trainer accumulates micro-batches
        ids = [ctl.submit(adaptive_job("adaptive-a")), ctl.submit(adaptive_job("adaptive-b", local_max=16))]
        ctl.run()
    finally:
        engine.close(grace=0)
    for jid in ids:
        assert ctl.jobs[jid].state is JobState.SUCCEEDED, ctl.jobs[jid].message
        starts = [a for a in actions if a.job_id == jid and a.kind in (ActionKind.START, ActionKind.RESIZE)]
        assert starts and all(a.batch is not None and 32 <= a.batch <= 256 for a in starts)
        mine = [r for r in reports if r.job_id == jid]
        assert mine and all(r.batch == starts[-1].batch for r in mine[-3:])  # it runs at what it was told
        assert mine[-1].loss is not None and mine[-1].loss <= LOSS_TARGET * 1.5
        grads = [(r.grad_sqr, r.grad_var) for r in mine if r.grad_sqr is not None and r.grad_var is not None]
        assert grads and all(s > 0 and v >= 0 and math.isfinite(s + v) for s, v in grads)  # goodput's inputs
        log = (engine.job_dir(jid) / "worker-0.log").read_text()
        assert f"adaptive: batch {starts[-1].batch}," in log
        micro = math.ceil(starts[-1].batch / 16) if jid == ids[1] else 1  # one worker: local = global batch
        assert f"micro-batches {micro}," in log
    assert noise_seen  # the scheduler's model folded the reported gradient statistics in
