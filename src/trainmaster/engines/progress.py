"""Tail a task's JSON-lines progress file and fold each batch of lines into one `Report`."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmaster.core.allocation import Allocation
from trainmaster.core.events import Report
from trainmaster.core.job import Target


class LineTail:
    """Reads the complete lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        out = []
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue  # a torn or foreign line: skip it, keep tailing
            if isinstance(item, dict) and isinstance(item.get("step"), int):
                out.append(item)
        return out


@dataclass
class Progress:
    """What a batch of report lines says, with speeds measured against the previous batch."""

    step: int
    loss: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    checkpoint_step: int | None
    epoch: float | None = None
    batch: int | None = None  # the last global batch a line named (batch-size adaptation)
    grad_sqr: float | None = None  # the last gradient statistics a line carried (goodput)
    grad_var: float | None = None

    def report(self, now: float, job_id: str, allocation: Allocation, *, epoch: bool = True) -> Report:
        """The `Report` these lines make; `epoch=False` leaves the epoch out (a job's last lines, at exit)."""
        return Report(now, job_id, self.step, loss=self.loss, samples_per_s=self.samples_per_s,
                      steps_per_s=self.steps_per_s, allocation=allocation, epoch=self.epoch if epoch else None,
                      batch=self.batch, grad_sqr=self.grad_sqr, grad_var=self.grad_var)


class ProgressFolder:
    """Keeps the last line seen, so speeds span batches."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None

    def fold(self, lines: list[dict[str, Any]]) -> Progress | None:
        if not lines:
            return None
        losses = [float(x["loss"]) for x in lines if x.get("loss") is not None]
        checkpoints = [int(x["step"]) for x in lines if x.get("checkpoint")]
        base = self.last if self.last is not None else lines[0]
        tail = lines if self.last is not None else lines[1:]
        end = lines[-1]
        dt = float(end["t"]) - float(base["t"])
        steps_per_s = samples_per_s = None
        if dt > 0 and end["step"] > base["step"]:
            steps_per_s = (end["step"] - base["step"]) / dt
            samples = sum(int(x.get("samples", 0)) for x in tail)
            samples_per_s = samples / dt if samples else None
        self.last = end
        epochs = [float(x["epoch"]) for x in lines if isinstance(x.get("epoch"), int | float)]
        batches = [int(x["batch"]) for x in lines if isinstance(x.get("batch"), int | float) and x["batch"] >= 1]
        grads = [(float(x["grad_sqr"]), float(x["grad_var"])) for x in lines
                 if isinstance(x.get("grad_sqr"), int | float) and isinstance(x.get("grad_var"), int | float)]
        return Progress(step=int(end["step"]), loss=sum(losses) / len(losses) if losses else None,
                        steps_per_s=steps_per_s, samples_per_s=samples_per_s,
                        checkpoint_step=checkpoints[-1] if checkpoints else None,
                        epoch=epochs[-1] if epochs else None, batch=batches[-1] if batches else None,
                        grad_sqr=grads[-1][0] if grads else None, grad_var=grads[-1][1] if grads else None)


class TargetWatch:
    """Whether a running job reached its `spec.target`, from what it reports (engines enforce targets).

    steps: the reported step; epochs: the `epoch` a job reports (`session.report(step, epoch=e)`);
    loss: the reported loss (averaged over a report line) at or below it; plateau: the loss improved by
    less than `plateau` (relative) over the last `window` steps.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.losses: deque[tuple[int, float]] = deque()  # (step, loss), the oldest at most `window` back

    def check(self, progress: Progress) -> str | None:
        t = self.target
        if t.steps is not None and progress.step >= t.steps:
            return f"step {progress.step} >= target {t.steps}"
        if t.epochs is not None and progress.epoch is not None and progress.epoch >= t.epochs:
            return f"epoch {progress.epoch:g} >= target {t.epochs}"
        if progress.loss is None:
            return None
        if t.loss is not None and progress.loss <= t.loss:
            return f"loss {progress.loss:.4g} <= target {t.loss:g}"
        if t.plateau is not None:
            self.losses.append((progress.step, progress.loss))
            while len(self.losses) > 1 and self.losses[1][0] <= progress.step - t.window:
                self.losses.popleft()
            first_step, first = self.losses[0]
            if progress.step - first_step >= t.window and first > 0 and (first - progress.loss) / first < t.plateau:
                return (f"loss plateaued: {first:.4g} -> {progress.loss:.4g} over steps {first_step}-"
                        f"{progress.step} (< {t.plateau:g} better)")
        return None
