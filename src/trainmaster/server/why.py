"""`why JOB` for a live job: `controller.why` run in the daemon thread, shaped for the API."""

from __future__ import annotations

from trainmaster.controller.loop import Controller
from trainmaster.controller.why import explain as explain_job


def explain(controller: Controller, job_id: str) -> dict[str, str | float | None] | None:
    """Reason, category and predicted start of a live job, or None when the controller no longer holds it."""
    if job_id not in controller.live:
        return None
    why = explain_job(controller, job_id)
    return {"reason": why.reason, "category": why.category, "eta": why.eta, "line": why.line(),
            "source": "controller"}
