"""`why JOB` for a live job: `controller.why` run in the daemon thread, shaped for the API."""

from __future__ import annotations

from typing import Any

from trainmaster.controller.loop import Controller
from trainmaster.controller.why import category
from trainmaster.controller.why import explain as explain_job
from trainmaster.core.states import JobState
from trainmaster.server.gate import Wait


def explain(controller: Controller, job_id: str, gated: Wait | None = None) -> dict[str, Any] | None:
    """Reason, category and predicted start of a live job, or None when neither the controller nor the gate
    holds it. A gated job (held, or waiting on a dependency) has no predicted start: people decide it."""
    if gated is not None:
        return {"reason": gated.text, "category": gated.kind, "eta": None, "now": controller.clock.now(),
                "line": f"{job_id}: pending ({gated.kind}) {gated.text}", "source": "gate"}
    if job_id not in controller.live:
        return None
    why = explain_job(controller, job_id)
    return {"reason": why.reason, "category": why.category, "eta": why.eta, "now": why.now, "line": why.line(),
            "source": "controller"}


def from_store(row: dict[str, Any]) -> dict[str, Any]:
    """The answer for a job the controller no longer holds (ended) or while it is busy: the stored reason."""
    reason = row["message"] or row["why"]
    # The store keeps the text, not the typed wait: a pending job's kind is known only to the live controller.
    return {"reason": reason, "category": category(None, JobState(row["state"])), "eta": None,
            "source": "store"}
