"""A workload: jobs with submit times, each carrying the ground truth only the simulator reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.core.job import JobSpec


class JobTruth(Protocol):
    """How a simulated job really behaves. Only the sim engine may call this."""

    @property
    def total_steps(self) -> float:
        """Steps until the job reaches its target."""
        ...

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        """True training speed on this allocation (0 when it cannot make progress).

        `cluster` lets a truth read the nodes' GPU types (Gavel throughputs differ per type).
        """
        ...

    def loss(self, step: float) -> float | None:
        """True loss after `step` steps, or None when the job reports no loss."""
        ...


@dataclass(frozen=True)
class BatchRun:
    """A job trained at a global batch the scheduler chose, from some point of its progress on."""

    rate: float  # progress (in the job's `total_steps` units) per second
    until: float  # progress at which `rate` changes (the end of an epoch); inf: never
    batch: int  # the global batch actually trained per optimizer step
    steps_per_s: float  # optimizer steps per second at that batch (what the job reports)
    grad_sqr: float  # squared norm of the true gradient now
    grad_var: float  # variance of a gradient estimate at the job's base batch now


@runtime_checkable
class BatchTruth(JobTruth, Protocol):
    """A truth that knows how the global batch changes a job's progress (batch-size adaptation)."""

    def at_batch(self, alloc: Allocation, batch: int, done: float) -> BatchRun:
        """How the job progresses on `alloc` at global batch `batch`, `done` steps in."""
        ...


def check_length(where: str, duration: float, gpus: int, names: tuple[str, str] = ("duration", "num_gpus")) -> None:
    """Refuse a trace row whose `LinearTruth` could not end: a NaN or infinite duration never finishes (a
    replay of one spun forever), a negative one has no meaning, and a job needs a GPU. `names`: the file's
    column names, so the error names the field to fix."""
    if not (math.isfinite(duration) and duration >= 0):
        raise SpecError(where, f"{names[0]} {duration!r} is out of range",
                        f"{names[0]} must be a finite number of seconds >= 0")
    if gpus < 1:
        raise SpecError(where, f"{names[1]} {gpus!r} is out of range", f"{names[1]} must be at least 1")


@dataclass(frozen=True)
class LinearTruth:
    """A trace job of known length: `duration` seconds on `gpus` GPUs, speed linear in GPUs.

    Progress is counted in steps of one second at the requested size, so
    `total_steps == duration` and the job runs at `held / gpus` steps per second.
    """

    duration: float
    gpus: int

    @property
    def total_steps(self) -> float:
        return self.duration

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        held = alloc.gpus(spec) if self.gpus > 0 else len(alloc)
        return held / max(self.gpus, 1)

    def loss(self, step: float) -> float | None:
        return None


@dataclass(frozen=True)
class WorkloadJob:
    job_id: str
    submit_time: float
    spec: JobSpec
    truth: JobTruth


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: tuple[WorkloadJob, ...]

    def __len__(self) -> int:
        return len(self.jobs)
