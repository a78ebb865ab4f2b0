"""Progress to the scheduler as JSON lines, aggregated so the step loop never waits on I/O.

`report()` only adds to running sums (about a microsecond). Every
`resolution` seconds the sums close into one line (last step, mean loss,
summed samples), so a job doing a thousand steps a second still writes ten
lines a second. A loss passed as a tensor is read (`.item()`, a device sync
on a GPU) only then, as the group's last value, never on every step. Lines
are written with one `write` about once a second, at once for the first
report of a run (the scheduler learns the job is stepping), and at exit.
The engine tails the file.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class Reporter:
    """Aggregating, buffered JSON-lines writer; a no-op when `path` is None."""

    def __init__(self, path: str | None, *, attempt: int = 0, world_size: int = 1, interval: float = 1.0,
                 resolution: float = 0.1) -> None:
        self.path = path
        self.attempt = attempt
        self.world_size = world_size
        self.interval = interval
        self.resolution = resolution
        self._lines: list[dict[str, Any]] = []
        self._open = False  # a group of reports is being summed
        self._group_start = 0.0
        self._step = 0
        self._loss_sum = 0.0
        self._loss_n = 0
        self._loss_tensor: torch.Tensor | None = None
        self._samples = 0
        self._last_flush = 0.0  # 0: the first report flushes at once
        self._fd: int | None = None
        self.fields: dict[str, float] = {}  # written on every line from now on (`Session.annotate`)

    def report(self, step: int, loss: float | torch.Tensor | None = None, samples: int | None = None,
               **extra: float) -> None:
        if self.path is None:
            return
        now = time.time()
        if not self._open:
            self._open, self._group_start = True, now
        self._step = step
        if isinstance(loss, float | int):
            self._loss_sum += loss
            self._loss_n += 1
        elif loss is not None:
            self._loss_tensor = loss
        if samples:
            self._samples += samples
        if extra or now - self._group_start >= self.resolution or not self._last_flush:
            self._close_group(now, extra)
            if now - self._last_flush >= self.interval:
                self.flush()

    def _close_group(self, now: float, extra: dict[str, float] | None = None) -> None:
        line: dict[str, Any] = {"t": now, "step": self._step, **self.fields}
        if self._loss_n:
            line["loss"] = self._loss_sum / self._loss_n
        elif self._loss_tensor is not None:
            line["loss"] = float(self._loss_tensor.detach())
        if self._samples:
            line["samples"] = self._samples
        if extra:
            line.update(extra)
        self._lines.append(line)
        self._open = False
        self._loss_sum, self._loss_n, self._samples, self._loss_tensor = 0.0, 0, 0, None

    def flush(self) -> None:
        if self.path is None:
            return
        if self._open:
            self._close_group(time.time())
        if not self._lines:
            return
        if self._fd is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        head = {"attempt": self.attempt, "world": self.world_size}
        text = "".join(json.dumps({**head, **line}) + "\n" for line in self._lines)
        os.write(self._fd, text.encode())
        self._lines.clear()
        self._last_flush = time.time()

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
