"""Job states and the table of legal moves between them, with a kept history."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from trainmaster.core.errors import IllegalTransition


class JobState(enum.Enum):
    PENDING = "pending"        # accepted, waiting for resources (also after preemption)
    RUNNING = "running"        # tasks placed and making progress
    STARTING = "starting"  # tasks placed; (re)starting from the last checkpoint
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"      # can never run here (too large, unknown queue, ...)

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C (hot paths)

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Holding resources."""
        return self is JobState.RUNNING or self is JobState.STARTING  # identity: no enum hashing (hot path)


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.RUNNING, JobState.REJECTED, JobState.CANCELLED,
                                 JobState.FAILED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.STARTING, JobState.PENDING, JobState.FAILED,
                                    JobState.CANCELLED, JobState.SUCCEEDED}),
    JobState.RUNNING: frozenset({JobState.STARTING, JobState.PENDING, JobState.SUCCEEDED, JobState.FAILED,
                                 JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.REJECTED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Transition:
    time: float
    source: JobState
    target: JobState
    reason: str


def check_transition(source: JobState, target: JobState, job_id: str = "") -> None:
    """Raise IllegalTransition unless the table allows source -> target."""
    if target not in TRANSITIONS[source]:
        raise IllegalTransition(f"job {job_id}: cannot go from {source.value} to {target.value}")
