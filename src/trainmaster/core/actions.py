"""What the controller tells an engine to do: the diff between plan and reality."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.job import JobSpec


class ActionKind(enum.Enum):
    START = "start"  # launch the job's tasks on `allocation`
    RESIZE = "resize"  # checkpoint, stop, relaunch on `allocation` (resize or migrate)
    RESTART = "restart"  # relaunch on the same allocation from the checkpoint (after a crash)
    STOP = "stop"  # checkpoint and stop all tasks (preemption, cancel, node lost)


class StopCause(enum.Enum):
    PREEMPT = "preempt"
    CANCEL = "cancel"
    NODE_LOST = "node-lost"
    FAILED = "failed"
    REVOKED = "revoked"  # the market's notice came: stop gracefully (checkpoint) before the node goes


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: str
    spec: JobSpec
    allocation: Allocation = EMPTY
    reason: str = ""
    cause: StopCause | None = None
    batch: int | None = None  # START/RESIZE of an adaptive job: the global batch the policy chose (TM_BATCH_SIZE)
