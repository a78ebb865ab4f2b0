"""What a run measured: per-job times and the cluster's GPU use over time.

GPU use is fed to `UsageListener`s: the controller tells every listener each
time an allocation changes (and the cluster's GPUs when nodes come and go),
so the timeline here, Prometheus and cost accounting plug in the same way
instead of each reading the controller's books.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from trainmaster.controller.records import JobRecord
from trainmaster.core.states import JobState


class UsageListener(Protocol):
    """Told of every change in what the cluster has in use or has; called on the controller's thread."""

    def allocated(self, t: float, record: JobRecord, used_gpus: int) -> None:
        """`record` now holds `record.allocation`; `used_gpus` GPUs are in use cluster-wide after the change."""
        ...

    def capacity_changed(self, t: float, gpus: int) -> None:
        """The cluster now has `gpus` GPUs (a node joined or was lost)."""
        ...


@dataclass(frozen=True, slots=True)
class JobOutcome:
    id: str
    submit: float
    first_start: float | None
    finish: float | None
    state: JobState
    restarts: int  # after failures
    gpus_requested: int
    resizes: int = 0
    preemptions: int = 0

    @property
    def jct(self) -> float | None:
        return None if self.finish is None else self.finish - self.submit

    @property
    def queueing(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    return float(np.percentile(values, q)) if values else math.nan


@dataclass
class UsageTimeline:
    """Step function of GPUs in use; appended whenever an allocation changes."""

    capacity: int
    points: list[tuple[float, int]] = field(default_factory=list)

    def allocated(self, t: float, record: JobRecord, used_gpus: int) -> None:
        self.record(t, used_gpus)

    def capacity_changed(self, t: float, gpus: int) -> None:
        self.capacity = gpus

    def record(self, t: float, used: int) -> None:
        if self.points and self.points[-1][0] == t:
            self.points[-1] = (t, used)
        elif not self.points or self.points[-1][1] != used:
            self.points.append((t, used))

    def gpu_seconds(self, start: float, end: float) -> float:
        total = 0.0
        for (t0, used), (t1, _) in zip(self.points, [*self.points[1:], (end, 0)], strict=True):
            a, b = max(t0, start), min(t1, end)
            if b > a:
                total += used * (b - a)
        return total

    def utilization(self, start: float, end: float) -> float:
        if end <= start or self.capacity <= 0:
            return math.nan
        return self.gpu_seconds(start, end) / (self.capacity * (end - start))


@dataclass(frozen=True)
class Summary:
    jobs: int
    finished: int
    mean_jct: float
    median_jct: float
    p95_jct: float
    p99_jct: float
    makespan: float
    mean_queueing: float
    gpu_utilization: float
    restarts: int  # after failures (a task crashed, a node was lost)
    resizes: int
    preemptions: int

    def as_dict(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def summarize(outcomes: list[JobOutcome], usage: UsageTimeline) -> Summary:
    done = [o for o in outcomes if o.state is JobState.SUCCEEDED and o.jct is not None]
    jcts = [o.jct for o in done if o.jct is not None]
    queueing = [o.queueing for o in outcomes if o.queueing is not None]
    start = min((o.submit for o in outcomes), default=0.0)
    end = max((o.finish for o in outcomes if o.finish is not None), default=start)
    return Summary(
        jobs=len(outcomes),
        finished=len(done),
        mean_jct=sum(jcts) / len(jcts) if jcts else math.nan,
        median_jct=percentile(jcts, 50),
        p95_jct=percentile(jcts, 95),
        p99_jct=percentile(jcts, 99),
        makespan=end - start,
        mean_queueing=sum(queueing) / len(queueing) if queueing else math.nan,
        gpu_utilization=usage.utilization(start, end),
        restarts=sum(o.restarts for o in outcomes),
        resizes=sum(o.resizes for o in outcomes),
        preemptions=sum(o.preemptions for o in outcomes),
    )
