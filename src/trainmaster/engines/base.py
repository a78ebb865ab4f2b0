"""The protocol every engine implements; the controller sees nothing else."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from trainmaster.core.actions import Action
from trainmaster.core.clock import Clock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, Report
from trainmaster.core.node import Node


class Outcome(enum.Enum):
    """How a job's last attempt ended while no daemon was watching it."""

    SUCCEEDED = "succeeded"  # every worker exited 0: the job is done, never run it again
    FAILED = "failed"  # a task exited with an error code: a failure, counted against maxRestarts
    INTERRUPTED = "interrupted"  # killed, or stopping: resume from the checkpoint


@dataclass(frozen=True, slots=True)
class Recovered:
    job_id: str
    attempt: int
    outcome: Outcome
    detail: str
    ended_at: float | None = None  # wall time the last worker's exit code was written (SUCCEEDED only)
    step: int | None = None  # the last step the attempt reported


class Engine(Protocol):
    @property
    def clock(self) -> Clock:
        """The clock this engine's events are stamped with."""
        ...

    def cluster(self) -> Cluster:
        """The nodes this engine runs on at the start."""
        ...

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out actions (in order). Must not block for long."""
        ...

    def wait(self, timeout: float | None) -> list[Event]:
        """Return the next events, waiting at most `timeout` seconds of this engine's clock.

        A simulated engine jumps its virtual clock to the next event (or to
        now + timeout); a real engine sleeps. With `timeout=None` and nothing
        that could ever happen, it returns [] at once.
        """
        ...

    def idle(self) -> bool:
        """True when no event can happen unless new actions arrive."""
        ...

    def recover(self) -> Mapping[str, Recovered]:
        """At daemon start, before any job starts: end what a dead predecessor left running, and say how
        each job's last attempt ended (job id -> Recovered). An engine that keeps nothing returns {}."""
        ...

    def close(self) -> None:
        """Stop every task (they checkpoint) and free what the engine holds."""
        ...

    def add_node(self, node: Node) -> None:
        """A node joins (a provider added it); `NodeAdded` follows from `wait`."""
        ...

    def remove_node(self, name: str) -> None:
        """A node leaves: its tasks are killed; `NodeLost` follows from `wait`."""
        ...

    def log_tasks(self, job_id: str) -> list[str]:
        """The job's tasks that left a log on this engine (`worker-0`, `ps-1`), sorted; [] when it keeps none
        (the simulator runs no process)."""
        ...

    def logs(self, job_id: str, task: str | None = None, *, follow: bool = False, tail: int | None = None,
             done: Callable[[], bool] | None = None, poll: float = 0.25) -> Iterator[str]:
        """A task's log (or every task's, each line prefixed `[task] `) in chunks of whole lines, read in bounded
        memory wherever the task ran (`engines.task_logs`). `tail=N` starts at the last N lines; `follow` polls
        every `poll` seconds until `done()` holds (default: the engine holds no task of the job). Safe to call
        from a thread other than the controller's."""
        ...


@runtime_checkable
class BulkReports(Protocol):
    """An engine that can hand a run of quiet progress reports to the controller without returning (the sim)."""

    @property
    def hands_reports(self) -> bool:
        """Whether `wait_reports` may hand reports over (else a caller uses `wait`)."""
        ...

    def wait_reports(self, timeout: float | None, interval: float | None,
                     on_report: Callable[[Report], bool] | None) -> list[Event]:
        """`wait`, with each time whose events are all reports handed to `on_report` (True: a decision is due,
        stop after this time) and the wait going on until `t + interval` from it (None: no deadline)."""
        ...
