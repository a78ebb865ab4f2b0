"""A one-worker job that opts into batch-size adaptation: digits MLP at the batch the scheduler chose (TM_BATCH_SIZE).

The learning rate follows the batch by square-root scaling; the backward pass
measures the gradient noise (`trainmaster.train.goodput`) and every progress
line carries the batch and the gradient statistics. It trains until the
engine stops it at the job's loss target (or `--steps`). `--local-max` (the job's
`spec.adaptiveBatch.localMax`, which the engine passes as TM_LOCAL_MAX, the default) caps the samples
one forward/backward computes: a larger local batch accumulates gradients over `micro_batches(...)` passes per step.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch
from torch import nn

import trainmaster.train as tm
from trainmaster.train.goodput import (
    GradientNoise,
    batch_size,
    local_max,
    measured_backward,
    measured_micro_backward,
    micro_batches,
    micro_slices,
    scaled_lr,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.digits.train import batch_indices, build_model, load_digits_tensors


def part_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seen: list[float]) -> torch.Tensor:
    """One micro-batch's mean loss (its value kept in `seen` for the report)."""
    loss = nn.functional.cross_entropy(model(x), y)
    seen.append(float(loss.detach()))
    return loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--base", type=int, default=32, help="the batch --lr was tuned for")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--local-max", type=int, default=local_max(),
                   help="the job's spec.adaptiveBatch.localMax (default: TM_LOCAL_MAX, which the engine sets)")
    args = p.parse_args()
    session = tm.init()
    batch = batch_size(args.base)
    torch.manual_seed(0)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=scaled_lr(args.lr, batch, args.base), momentum=0.9)
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])  # the optimizer starts afresh: its learning rate follows the batch
    params = [q for q in model.parameters() if q.requires_grad]
    x, y = load_digits_tensors()
    local = session.local_batch_size(batch)
    half = max(1, local // 2)
    count = micro_batches(local, 1, args.local_max)  # (local: this replica's share, whatever TM_BATCH_MODE)
    noise = GradientNoise(args.base)
    session.annotate(batch=batch)
    print(f"adaptive: batch {batch}, local {local}, micro-batches {count}, "
          f"lr {optimizer.param_groups[0]['lr']:.4f}", flush=True)
    for step in session.steps(args.steps, state=lambda: {"model": model.state_dict()}):
        idx = batch_indices(step, session.rank, local, len(x), 0)
        if count > 1:  # gradient accumulation: one forward/backward per micro-batch of at most --local-max
            parts = [idx[s] for s in micro_slices(len(idx), count)]
            seen: list[float] = []
            losses = [functools.partial(part_loss, model, x[p], y[p], seen) for p in parts]
            measured_micro_backward(params, losses, [len(p) for p in parts], noise)
            mean_loss = sum(seen) / len(seen)
        else:
            a, b = idx[:half], idx[half:]
            loss_a = nn.functional.cross_entropy(model(x[a]), y[a])
            loss_b = nn.functional.cross_entropy(model(x[b]), y[b]) if len(b) else loss_a * 0
            measured_backward(params, loss_a, loss_b, (len(a), max(len(b), 1)), noise)
            mean_loss = float((loss_a + loss_b).detach()) / 2  # detached: no grad-to-scalar warning
        optimizer.step()
        session.annotate(**noise.stats())
        session.report(step + 1, loss=mean_loss, samples=local)
    session.close()


if __name__ == "__main__":
    main()
