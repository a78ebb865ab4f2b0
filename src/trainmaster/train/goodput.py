"""Batch-size adaptation inside a job: the batch the scheduler chose, a learning rate scaled to it,
and the gradient statistics the scheduler's goodput model needs.

A job that opts in (`spec.adaptiveBatch: {min, max, base}`) is started with
`TM_BATCH_SIZE`, the global batch with the most goodput on its allocation
(`batch_size(default)` reads it). The learning rate follows the batch by
square-root scaling, `lr * sqrt(batch / base)` (Krizhevsky 2014; Hoffer et al.
2017): stateless, so it survives a restart at another batch unchanged, and
safe for SGD and Adam alike. AdaScale (Pollux's choice) would adapt it per
step from the same statistics, but needs the optimizer's cooperation.

The scheduler learns the gradient noise scale from two numbers the job
reports: `grad_sqr`, the squared norm of the true gradient, and `grad_var`,
the variance of a gradient estimate at the base batch. `GradientNoise` gets
both from two estimates at different batch sizes (McCandlish et al. 2018,
appendix A): the gradient of each half of a batch and of the whole batch.
`measured_backward` runs the backward pass that way and leaves the whole
batch's mean gradient in `.grad`, so the optimizer step is unchanged.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence

import torch

SMOOTHING = 0.1  # weight of the newest estimate in the moving averages (single estimates are noisy)


def _env_whole(name: str) -> int | None:
    """A positive whole number from the environment variable `name`, or None when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"environment variable {name}={raw!r} must be at least 1")
    return value


def batch_size(default: int) -> int:
    """The global batch the scheduler chose (`TM_BATCH_SIZE`), or `default` when it chose none."""
    value = _env_whole("TM_BATCH_SIZE")
    return default if value is None else value


def local_max() -> int | None:
    """The job's declared local-batch cap (`spec.adaptiveBatch.localMax`, passed as `TM_LOCAL_MAX`), or None."""
    return _env_whole("TM_LOCAL_MAX")


def micro_batches(batch: int, workers: int, local_max: int | None) -> int:
    """Micro-batches per optimizer step: `ceil(local / local_max)` for the local batch `ceil(batch / workers)`.

    A job that declares `spec.adaptiveBatch.localMax` (the most samples a replica computes at once) runs
    this many forward/backward passes per step and accumulates their gradients (`measured_micro_backward`);
    the scheduler's goodput law counts the same (`trainmaster.models.speed.micro_batches`). 1 without a cap.
    """
    if batch < 1 or workers < 1:
        raise ValueError(f"need batch >= 1 and workers >= 1, got {batch} and {workers}")
    if local_max is None:
        return 1
    if local_max < 1:
        raise ValueError(f"local_max must be at least 1, got {local_max}")
    local = -(-batch // workers)
    return -(-local // local_max)


def micro_slices(local: int, count: int) -> list[slice]:
    """`count` contiguous parts of a local batch of `local` samples, sizes differing by at most one."""
    count = max(1, min(count, local))
    bounds = [local * i // count for i in range(count + 1)]
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def scaled_lr(lr: float, batch: int, base: int) -> float:
    """Square-root scaling: the learning rate tuned at `base` for a step at `batch`."""
    return lr * math.sqrt(batch / base)


class GradientNoise:
    """Moving averages of the gradient's squared norm and its variance at `base` (module doc)."""

    def __init__(self, base: int, smoothing: float = SMOOTHING) -> None:
        self.base = base
        self.smoothing = smoothing
        self.sqr: float | None = None
        self.var: float | None = None

    def update(self, small_sqr: float, small_batch: float, big_sqr: float, big_batch: float) -> None:
        """Fold in |g|^2 of one gradient at `small_batch` samples and of one at `big_batch` (> small).

        E|g_b|^2 = |G|^2 + tr(S)/b for a mean over b samples; two batch sizes give both unknowns.
        """
        if not big_batch > small_batch > 0:
            raise ValueError(f"need big_batch > small_batch > 0, got {big_batch} and {small_batch}")
        sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
        trace = (small_sqr - big_sqr) / (1.0 / small_batch - 1.0 / big_batch)
        var = trace / self.base
        a = self.smoothing
        self.sqr = sqr if self.sqr is None else self.sqr + a * (sqr - self.sqr)
        self.var = var if self.var is None else self.var + a * (var - self.var)

    def stats(self) -> dict[str, float]:
        """`grad_sqr` and `grad_var` for `session.report(...)`; empty until both averages are positive."""
        if self.sqr is None or self.var is None or self.sqr <= 0 or self.var < 0:
            return {}
        return {"grad_sqr": self.sqr, "grad_var": self.var}


def _sqnorm(grads: Iterable[torch.Tensor]) -> float:
    return float(sum((g.double().pow(2).sum() for g in grads), start=torch.zeros((), dtype=torch.float64)))


def measured_backward(params: list[torch.nn.Parameter], first: torch.Tensor, second: torch.Tensor,
                      sizes: tuple[int, int], noise: GradientNoise) -> None:
    """Backward of two halves' mean losses; `.grad` ends as the whole batch's mean gradient.

    `first` and `second` are the mean losses of the two parts (`sizes` samples
    each). Their gradients and the whole's feed `noise`. With several
    all-reduce workers, call it inside `model.no_sync()` and all-reduce the
    gradients after it (the statistics are then the local ones).
    """
    measured_micro_backward(params, [lambda: first, lambda: second], list(sizes), noise)


def measured_micro_backward(params: list[torch.nn.Parameter], losses: Sequence[Callable[[], torch.Tensor]],
                            sizes: Sequence[int], noise: GradientNoise) -> None:
    """`measured_backward` over micro-batches: `losses[i]()` is micro-batch i's mean loss (`sizes[i]` samples).

    Each is built and run backward one at a time (only one graph in memory: why a job accumulates); the
    first half of them (at least one) make one part, the rest the other, whose gradients feed `noise`;
    `.grad` ends as the whole local batch's mean gradient. Needs at least two micro-batches: with one,
    split it in halves and call `measured_backward`.
    """
    if len(losses) < 2 or len(losses) != len(sizes):
        raise ValueError(f"need two or more micro-batches, one size each; got {len(losses)} and {len(sizes)}")
    half = len(losses) // 2
    g1 = _mean_gradient(params, losses[:half], sizes[:half])
    g2 = _mean_gradient(params, losses[half:], sizes[half:])
    n1, n2 = sum(sizes[:half]), sum(sizes[half:])
    whole = [(n1 * a + n2 * b) / (n1 + n2) for a, b in zip(g1, g2, strict=True)]
    small = (_sqnorm(g1) + _sqnorm(g2)) / 2
    noise.update(small, (n1 + n2) / 2, _sqnorm(whole), n1 + n2)
    for p, g in zip(params, whole, strict=True):
        p.grad = g


def _mean_gradient(params: list[torch.nn.Parameter], losses: Sequence[Callable[[], torch.Tensor]],
                   sizes: Sequence[int]) -> list[torch.Tensor]:
    """The mean gradient over micro-batches (each weighted by its samples), one backward at a time."""
    total = sum(sizes)
    for p in params:
        p.grad = None
    for loss, n in zip(losses, sizes, strict=True):
        torch.autograd.backward(loss() if len(losses) == 1 else loss() * (n / total))
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
