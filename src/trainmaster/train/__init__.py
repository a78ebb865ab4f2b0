"""The library user code imports inside a job: standard library and torch only.

```python
import trainmaster.train as tm

session = tm.init()                       # rank, world size, rendezvous from the engine's env
state = session.restore()                 # None on a fresh start; sets session.start_step
model = session.wrap(net)                 # DistributedDataParallel when there are several workers
for step in session.steps(total, state=lambda: {"model": net.state_dict()}):
    ...
    session.report(step, loss=loss, samples=batch)  # the tensor: read ten times a second, not every step
```

SIGTERM (resize, preemption) checkpoints at the next step boundary and exits
with `EXIT_PREEMPTED`; the engine relaunches from that checkpoint.
"""

from __future__ import annotations

from typing import Any

import torch

from trainmaster.train.checkpoint import load, save_atomic
from trainmaster.train.env import EXIT_PREEMPTED, TaskEnv
from trainmaster.train.ps import ParameterClient, serve, split_parameters
from trainmaster.train.session import Session

__all__ = [
    "EXIT_PREEMPTED", "ParameterClient", "Session", "TaskEnv", "current", "init", "load", "report", "restore",
    "save", "save_atomic", "serve", "split_parameters",
]

_current: Session | None = None


def init() -> Session:
    """Read the environment, join the job's process group, and make this the process's session."""
    global _current
    if _current is None:
        _current = Session()
    return _current


def current() -> Session:
    if _current is None:
        raise RuntimeError("call trainmaster.train.init() first")
    return _current


def report(step: int, loss: float | torch.Tensor | None = None, samples: int | None = None, **extra: float) -> None:
    current().report(step, loss=loss, samples=samples, **extra)


def save(state: dict[str, Any], step: int | None = None) -> None:
    current().save(state, step)


def restore() -> dict[str, Any] | None:
    return current().restore()
