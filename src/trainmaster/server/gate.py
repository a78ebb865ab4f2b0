"""Held jobs and job dependencies: pending jobs the daemon keeps out of the controller until they may start.

Slurm's `scontrol hold` / `release`, and `--dependency=afterok:A,B` with
`kill_invalid_depend`: a held job, or one whose dependencies (`spec.after`)
have not all succeeded, is withdrawn from the controller, so no policy can
start it; a dependency that failed, was cancelled or rejected ends the
dependent `cancelled` with the reason. The store keeps the `held` flag and
the document keeps `spec.after`, so a restarted daemon gates them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainmaster.controller.records import JobRecord
from trainmaster.controller.why import DEPENDENCY, HELD
from trainmaster.core.errors import TrainmasterError
from trainmaster.core.job import JobSpec

SUCCEEDED = "succeeded"
NEVER_SUCCEEDS = frozenset({"failed", "cancelled", "rejected"})


class Conflict(TrainmasterError):
    """The job is not in a state the request applies to (the API answers 409)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a gated job waits: `kind` for code (held | dependency), `text` for people."""

    kind: str
    detail: str
    final: bool = False  # a dependency can never succeed: the job ends cancelled

    @property
    def text(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class Parked:
    """A gated job: its spec and submit time, and the controller's record when it was withdrawn from it."""

    spec: JobSpec
    submit_time: float
    record: JobRecord | None = None  # keeps restarts, steps and decisions across a hold


def wait_of(held: bool, spec: JobSpec, state_of: Callable[[str], str | None]) -> Wait | None:
    """The gate's verdict for a job: a Wait while it may not start, None once it may.

    `state_of(job_id)` is a job's state, None for an unknown job.
    """
    if held:
        return Wait(HELD, "by the user; `trainmaster release JOB` lets it start")
    waiting = []
    for dep in spec.after:
        state = state_of(dep)
        if state == SUCCEEDED:
            continue
        if state is None or state in NEVER_SUCCEEDS:
            return Wait(DEPENDENCY, f"{dep} {state or 'is unknown'}, so this job can never start (it runs only "
                                    f"after {dep} succeeds)", final=True)
        waiting.append(dep)
    if waiting:
        return Wait(DEPENDENCY, f"waits for {', '.join(waiting)} to succeed")
    return None
