"""Time each step spends waiting on gradient sync, measured in DistributedDataParallel's all-reduce.

Why: from step time alone compute and sync are confounded at sizes a job has not run at; Pollux's
agent measures both, and a report that carries sync (`Report.sync_time`) lets a speed law or a person
see a step's sync share (bench/results/trainmaster.md, twelfth look, tried it in the law). DDP
overlaps its bucket all-reduces with the backward pass, so the sync a step *waits on* is what follows
the last bucket's launch (the backward pass is done then): from that launch to the moment every
bucket's all-reduce has completed. `SyncTimer` is a DDP communication hook doing the default
all-reduce (divide by the world size, then sum) that records exactly that span once per step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from torch._C._distributed_c10d import GradBucket


class SyncTimer:
    """A DDP comm hook (`SyncTimer(on_sync).attach(ddp)`) that times each step's exposed sync.

    `on_sync(seconds)` is called once per step, from the thread that completes the last all-reduce, before
    the backward pass returns (DDP waits on these futures): never while the step loop reads what it summed.
    """

    def __init__(self, on_sync: Callable[[float], None], group: dist.ProcessGroup | None = None) -> None:
        self.on_sync = on_sync
        self.group = group
        self._pending = 0  # buckets launched this step whose all-reduce has not completed
        self._last_launch: float | None = None  # when the step's last bucket was launched
        self._lock = threading.Lock()  # completions may arrive on the backend's threads

    def attach(self, ddp: DistributedDataParallel) -> None:
        """Register as `ddp`'s communication hook (through a lambda: DDP rejects string annotations, which
        `from __future__ import annotations` makes of `hook`'s)."""
        ddp.register_comm_hook(self, lambda state, bucket: state.hook(bucket))

    def hook(self, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        tensor = bucket.buffer().div_(dist.get_world_size(self.group))  # the mean, as DDP's default hook
        with self._lock:
            self._pending += 1
            if bucket.is_last():
                self._last_launch = time.monotonic()
        work = dist.all_reduce(tensor, group=self.group, async_op=True)
        assert work is not None  # (async_op=True always returns the work handle)
        done: torch.futures.Future[torch.Tensor] = work.get_future().then(self._done)
        return done

    def _done(self, fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        with self._lock:
            self._pending -= 1
            if self._pending == 0 and self._last_launch is not None:
                self.on_sync(time.monotonic() - self._last_launch)
                self._last_launch = None
        return fut.value()[0]
