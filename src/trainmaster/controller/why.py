"""Why a job waits and when it is predicted to start, from a controller's state and its last plan.

Used alike by `trainmaster why` on a simulated run and by the daemon on the
live scheduler: both hold a `Controller`. The category of a pending job is the
kind of its typed wait in the last plan (`policies.waits.WaitKind`: quota, gang,
fragmentation, reservation, priority, ...; `backoff` while it waits out a restart
backoff), `never-fits` for a rejected job; the text beside it is rendered from the
same wait, so rewording it never changes the category. The ETA is the policy's own prediction where it made one (the
reserved head job), else a conservative-backfill replay of the pending jobs
on the running jobs' predicted finishes (`policies.backfill.predict_starts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.errors import TrainmasterError
from trainmaster.core.states import JobState
from trainmaster.core.timefmt import humanize, relative
from trainmaster.policies.backfill import predict_starts
from trainmaster.policies.queues import job_order_key
from trainmaster.policies.waits import Wait, WaitKind

HELD, DEPENDENCY = WaitKind.HELD.value, WaitKind.DEPENDENCY.value  # the daemon's gate (server.gate)


@dataclass(frozen=True, slots=True)
class Why:
    job_id: str
    state: str
    category: str  # a `WaitKind` value (pending or rejected), or running | done | waiting
    reason: str
    eta: float | None  # predicted start (pending jobs); None when unknown or not pending
    now: float
    started: float | None = None
    history: tuple[tuple[float, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"job": self.job_id, "state": self.state, "category": self.category, "reason": self.reason,
                "eta": self.eta, "now": self.now, "started": self.started,
                "history": [list(h) for h in self.history]}

    def line(self) -> str:
        """One human line: `job: state (category) reason; predicted start ...`; wall-clock instants read
        `14:05:12 (in 3m07s)`, simulated ones `t=1000 (in 16m40s)`."""
        text = f"{self.job_id}: {self.state} ({self.category}) {self.reason}"
        if self.state == JobState.PENDING.value:
            text += (f"; predicted start t={self.eta:.0f} ({relative(self.eta, self.now)})"
                     if self.eta is not None else "; no predicted start (running jobs lack estimates)")
        return humanize(text, self.now)


def advance_to(controller: Controller, at: float) -> None:
    """Drive the controller until its engine's clock reaches `at` (`why --at` on a simulated run)."""
    controller.cycle()
    while controller.clock.now() < at:
        events = controller.engine.wait(max(0.0, at - controller.clock.now()))
        for event in events:
            controller.handle(event)
        controller.cycle()
        if not events:
            break


def category(wait: Wait | None, state: JobState, *, parked: bool = False) -> str:
    """The kind of wait `why` shows: from the typed wait, never from its text."""
    if state is JobState.REJECTED:
        return WaitKind.NEVER_FITS.value
    if state.active:
        return "running"
    if state.terminal:
        return "done"
    if parked:
        return WaitKind.BACKOFF.value
    return wait.kind.value if wait is not None else "waiting"


def etas(controller: Controller) -> dict[str, float | None]:
    """Predicted start of every pending job, from the last plan and the running jobs' predictions."""
    snap = controller.snapshot()
    plan = controller.last_plan
    pending = sorted((v for v in snap.jobs.values() if v.pending), key=job_order_key)
    known = {jid: t for jid, t in plan.eta.items() if jid in snap.jobs}
    allocations = {jid: v.allocation for jid, v in snap.jobs.items() if v.active}
    # A decision left these jobs pending and nothing frees room before a running job ends (`not_before`).
    decided = math.isfinite(controller.last_cycle_at)
    return predict_starts(snap, allocations, pending, known, not_before=snap.now if decided else None)


def explain_record(controller: Controller, record: JobRecord, eta: Mapping[str, float | None] | None) -> Why:
    now = controller.clock.now()
    pending = record.state is JobState.PENDING
    parked = pending and record.id in controller.parked
    wait = controller.last_plan.waits.get(record.id) if pending and not parked else None
    reason = (controller.last_plan.reasons.get(record.id) if pending else None) or record.why or record.message
    predicted = None
    if pending:
        predicted = (eta if eta is not None else etas(controller)).get(record.id)
    return Why(job_id=record.id, state=record.state.value, category=category(wait, record.state, parked=parked),
               reason=reason, eta=predicted, now=now, started=record.first_start,
               history=tuple(record.decisions[-10:]))


def explain(controller: Controller, job_id: str) -> Why:
    """Why `job_id` is where it is, with its predicted start when pending."""
    record = controller.jobs.get(job_id)
    if record is None:
        raise TrainmasterError(f"no job {job_id!r}; list jobs with `trainmaster queue`")
    return explain_record(controller, record, None)


def explain_pending(controller: Controller) -> list[Why]:
    """`why` for every pending job, sharing one ETA replay."""
    eta = etas(controller)
    return [explain_record(controller, r, eta) for r in controller.live.values() if r.state is JobState.PENDING]
