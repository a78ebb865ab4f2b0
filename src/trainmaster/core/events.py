"""What engines report to the controller. Plain frozen records, time-stamped."""

from __future__ import annotations

from dataclasses import dataclass

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobSpec
from trainmaster.core.node import Node


@dataclass(frozen=True, slots=True)
class JobArrived:
    """A job enters the system (trace replay, or a submit forwarded by an engine)."""

    time: float
    job_id: str
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobRunning:
    """All tasks of the allocation are up and stepping (after start or restart)."""

    time: float
    job_id: str
    allocation: Allocation


@dataclass(frozen=True)
class Report:
    """Progress a running job sends: what `train.report` carries.

    Without slots (its fields in the instance `__dict__`): `progress_report` builds one without the frozen
    init's `object.__setattr__` per field -- the simulator sends millions.
    """

    time: float
    job_id: str
    step: int
    loss: float | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    allocation: Allocation | None = None
    epoch: float | None = None
    batch: int | None = None  # global batch the job ran these steps at (batch-size adaptation)
    grad_sqr: float | None = None  # squared norm of the gradient (goodput: the noise scale's signal)
    grad_var: float | None = None  # its variance at the job's base batch (the noise)


def progress_report(time: float, job_id: str, step: int, loss: float | None, steps_per_s: float | None,
                    allocation: Allocation | None, batch: int | None = None, grad_sqr: float | None = None,
                    grad_var: float | None = None) -> Report:
    """`Report(...)` with these fields (the others None), set in one `__dict__` update: the one place that
    relies on `Report` having no slots; it must name every field (`tests/test_full23_bulk_reports.py` checks)."""
    report = object.__new__(Report)
    report.__dict__.update(time=time, job_id=job_id, step=step, loss=loss, samples_per_s=None,
                           steps_per_s=steps_per_s, allocation=allocation, epoch=None, batch=batch,
                           grad_sqr=grad_sqr, grad_var=grad_var)
    return report


@dataclass(frozen=True, slots=True)
class JobStopped:
    """The job's tasks exited on request (preemption); it checkpointed at `step`."""

    time: float
    job_id: str
    step: int | None = None


@dataclass(frozen=True, slots=True)
class JobFinished:
    time: float
    job_id: str
    succeeded: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class TaskFailed:
    """A task crashed or was killed; the engine restarts the job from its checkpoint."""

    time: float
    job_id: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class NodeLost:
    """A node vanished (transient revocation, machine failure)."""

    time: float
    node: str


@dataclass(frozen=True, slots=True)
class RevocationNotice:
    """The market will take a transient node at `lost_at` (GCE gives 30 s): checkpoint now; `NodeLost` follows."""

    time: float
    node: str
    lost_at: float


@dataclass(frozen=True, slots=True)
class NodeAdded:
    time: float
    node: Node


Event = (JobArrived | JobRunning | Report | JobStopped | JobFinished | TaskFailed | NodeLost | NodeAdded
         | RevocationNotice)
