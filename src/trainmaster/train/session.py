"""One task's view of its job: rendezvous, checkpoints, progress, and stopping on request.

The engine stops a job for a resize or a preemption with SIGTERM. The handler
only sets a flag; the step iterator notices it at a step boundary (all-reduce
workers agree on it in a tiny all-reduce about every 50 ms, so no rank is left
waiting in a collective), rank 0 saves a checkpoint, and every task exits with
`EXIT_PREEMPTED`. The next launch, at whatever world size, resumes from it.
"""

from __future__ import annotations

import atexit
import datetime
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from trainmaster.train.checkpoint import load, save_atomic
from trainmaster.train.env import EXIT_PREEMPTED, TaskEnv
from trainmaster.train.ps import ParameterClient
from trainmaster.train.report import Reporter

StateFn = Callable[[], dict[str, Any]]
GLOO_DRAIN_SECONDS = 0.25  # see Session._leave_group


class Session:
    """Built by `init()`; one per process."""

    def __init__(self, env: TaskEnv | None = None, *, rendezvous_timeout: float = 60.0) -> None:
        self.env = env or TaskEnv.from_env()
        self.reporter = Reporter(self.env.report_file if self.env.is_chief else None,
                                 attempt=self.env.attempt, world_size=self.env.world_size)
        self.start_step = 0
        self.step = 0
        self._stop = False
        self._in_loop = False
        self._next_check = 0  # step of the next agreed stop check (all-reduce workers)
        self._last_check = (0, time.monotonic())
        self._last_save = time.monotonic()
        if self.env.cpus > 0:
            torch.set_num_threads(self.env.cpus)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self.reporter.close)
        self.distributed = (self.env.architecture == "allreduce" and self.env.role == "worker"
                            and self.env.world_size > 1)
        if self.distributed:
            atexit.register(self._leave_at_exit)
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        if self.distributed and not dist.is_initialized():
            dist.init_process_group(
                backend="nccl" if self.device.type == "cuda" else "gloo",
                init_method=f"tcp://{self.env.master_addr}:{self.env.master_port}",
                rank=self.env.rank, world_size=self.env.world_size,
                timeout=datetime.timedelta(seconds=rendezvous_timeout),
            )

    def _leave_at_exit(self) -> None:
        # atexit handlers run before finalization begins, so the gloo threads can still take the GIL here
        if dist.is_initialized():
            self._leave_group()

    # -- identity ------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def is_chief(self) -> bool:
        return self.env.is_chief

    def local_batch_size(self, batch: int) -> int:
        """Per-worker batch: `batch` split over the workers (TM_BATCH_MODE=keep) or `batch` itself (per-worker)."""
        return self.env.local_batch_size(batch)

    def wrap(self, model: nn.Module) -> nn.Module:
        """Move `model` to this task's device; DistributedDataParallel when there are several workers."""
        model = model.to(self.device)
        if not self.distributed:
            return model
        ids = [0] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def parameter_client(self, model: nn.Module, *, lr: float, momentum: float = 0.0) -> ParameterClient:
        """Connect a worker to the job's parameter servers (worker 0 seeds them with `model`'s values)."""
        return ParameterClient(model, self.env, lr=lr, momentum=momentum, on_stop=self.request_stop)

    # -- progress ------------------------------------------------------------
    def report(self, step: int, loss: float | torch.Tensor | None = None, samples: int | None = None,
               **extra: float) -> None:
        """Record progress (rank 0 only; cheap, written about once a second).

        Pass the loss tensor itself to skip a `.item()` (a device sync) on every step.
        """
        self.reporter.report(step, loss=loss, samples=samples, **extra)

    def annotate(self, **values: float) -> None:
        """Fields every following progress line carries (`batch`, `grad_sqr`, `grad_var`), at no cost per step."""
        self.reporter.fields.update(values)

    # -- checkpoints ---------------------------------------------------------
    def restore(self) -> dict[str, Any] | None:
        """The state of the last checkpoint (and `start_step` set from it), or None on a fresh start."""
        payload = load(self.env.checkpoint_dir)
        if payload is None:
            return None
        self.start_step = self.step = int(payload["step"])
        print(f"trainmaster: resumed from step {self.start_step} (saved at world size "
              f"{payload.get('world_size')}, now {self.world_size})", file=sys.stderr, flush=True)
        state: dict[str, Any] = payload["state"]
        return state

    def save(self, state: dict[str, Any], step: int | None = None) -> None:
        """Checkpoint `state` atomically as of `step` (rank 0 only; other ranks return at once)."""
        if not self.is_chief:
            return
        at = self.step if step is None else step
        save_atomic({"step": at, "world_size": self.world_size, "time": time.time(), "state": state},
                    self.env.checkpoint_dir)
        self._last_save = time.monotonic()
        self.reporter.report(at, checkpoint=1.0)  # tells the engine how far a restart resumes from

    # -- stopping ------------------------------------------------------------
    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._stop = True
        if not self._in_loop:  # not stepping yet: nothing new to save
            self._exit(None)

    @property
    def stopping(self) -> bool:
        """A stop was asked for (SIGTERM: a resize, a preemption, a revocation notice): a loop body that waits
        on something of its own should give up and let the step loop checkpoint and exit."""
        return self._stop

    def request_stop(self) -> None:
        """Ask the step loop to checkpoint and exit at the next boundary (as SIGTERM does)."""
        self._stop = True

    def _agreed_stop(self, step: int) -> bool:
        """Whether to stop after `step`; all-reduce workers agree on it so none waits in a collective alone.

        The check is a tiny all-reduce. Its period in steps is agreed in the
        same all-reduce (the largest proposal wins, so every rank keeps the
        same schedule): fixed by TM_STOP_CHECK_EVERY, or adapted so a check
        happens about every 50 ms whatever the step time.
        """
        if not self.distributed:
            return self._stop
        if step < self._next_check:
            return False
        now = time.monotonic()
        period = self.env.stop_check_every
        if not period:
            elapsed = now - self._last_check[1]
            rate = (step - self._last_check[0]) / elapsed if elapsed > 0 else 1.0
            period = max(1, min(100, int(0.05 * rate)))
        flags = torch.tensor([1.0 if self._stop else 0.0, float(period)], device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        self._next_check = step + int(flags[1].item())
        self._last_check = (step, now)
        return bool(flags[0].item() > 0)

    def _exit(self, state: StateFn | None) -> NoReturn:
        if state is not None:
            self.save(state())
        self.reporter.close()
        print(f"trainmaster: stopped at step {self.step} for a resize or preemption", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_PREEMPTED)

    def steps(self, total: int, state: StateFn | None = None) -> Iterator[int]:
        """Yield step numbers from the checkpoint's step up to `total`.

        Between steps: checkpoint `state()` every TM_CHECKPOINT_EVERY seconds
        (rank 0), and on a stop request checkpoint and exit with EXIT_PREEMPTED.
        At the end, a final checkpoint.
        """
        step = self.start_step
        self._in_loop = True
        self._last_save = time.monotonic()
        self._next_check = step + 1
        self._last_check = (step, self._last_save)
        try:
            while step < total:
                yield step
                step += 1
                self.step = step
                if self._agreed_stop(step):
                    self._exit(state)
                if state is not None and self.is_chief and \
                        time.monotonic() - self._last_save >= self.env.checkpoint_every:
                    self.save(state(), step)
            if state is not None:
                self.save(state(), step)
            self.reporter.flush()
        finally:
            self._in_loop = False

    def close(self) -> None:
        """Flush progress and leave the process group (also done at exit when the script does not call it)."""
        self.reporter.close()
        if self.distributed and dist.is_initialized():
            self._leave_group()

    @staticmethod
    def _leave_group() -> None:
        """Leave the process group, then let go of the GIL for a moment before the interpreter finalizes.

        torch 2.13's gloo worker threads release each finished collective
        themselves, and one launched inside `backward()` (DDP's all-reduce)
        holds the autograd context, whose release takes the GIL. A thread that
        gets there after the interpreter has begun to finalize is killed inside
        a C++ destructor and the process aborts ("terminate called without an
        active exception", exit 134) after a complete run (pytorch/pytorch#190489).
        Every collective has completed by now; the pause lets those threads
        finish with their last one while the interpreter is still whole.
        """
        dist.destroy_process_group()
        time.sleep(GLOO_DRAIN_SECONDS)
