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

import math
import os
from collections.abc import Iterable

import torch

SMOOTHING = 0.1  # weight of the newest estimate in the moving averages (single estimates are noisy)


def batch_size(default: int) -> int:
    """The global batch the scheduler chose (`TM_BATCH_SIZE`), or `default` when it chose none."""
    raw = os.environ.get("TM_BATCH_SIZE", "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable TM_BATCH_SIZE={raw!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"environment variable TM_BATCH_SIZE={raw!r} must be at least 1")
    return value


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
    n1, n2 = sizes
    for p in params:
        p.grad = None
    torch.autograd.backward(first)
    g1 = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    torch.autograd.backward(second)
    g2 = [p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in params]
    whole = [(n1 * a + n2 * b) / (n1 + n2) for a, b in zip(g1, g2, strict=True)]
    small = (_sqnorm(g1) + _sqnorm(g2)) / 2
    noise.update(small, (n1 + n2) / 2, _sqnorm(whole), n1 + n2)
    for p, g in zip(params, whole, strict=True):
        p.grad = g
