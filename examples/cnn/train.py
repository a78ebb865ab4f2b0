"""A small CNN on synthetic images, all-reduce, elastic between 1 and 4 workers.

Each of 4 classes is a fixed random 16x16 pattern; a sample is its class's
pattern plus noise, generated from (seed, step, rank), so there is nothing to
download and a resumed run continues on the same data stream. The global
batch is kept across world sizes.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

import trainmaster.train as tm

CLASSES, SIZE = 4, 16


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * (SIZE // 4) ** 2, CLASSES),
    )


def synthetic_batch(step: int, rank: int, size: int, seed: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    patterns = torch.randn(CLASSES, 1, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank + 1)
    labels = torch.randint(0, CLASSES, (size,), generator=g)
    images = patterns[labels] + noise * torch.randn(size, 1, SIZE, SIZE, generator=g)
    return images, labels


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=int(os.environ.get("TM_TARGET_STEPS", "400")))
    p.add_argument("--batch", type=int, default=32, help="global batch size")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--noise", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (demos, tests)")
    args = p.parse_args(argv)

    session = tm.init()
    torch.manual_seed(args.seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    net = session.wrap(model)
    local = session.local_batch_size(args.batch)
    for step in session.steps(args.steps, state=lambda: {"model": model.state_dict(),
                                                          "optimizer": optimizer.state_dict()}):
        images, labels = synthetic_batch(step, session.rank, local, args.seed, args.noise)
        loss = nn.functional.cross_entropy(net(images.to(session.device)), labels.to(session.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_time:
            time.sleep(args.step_time)
        session.report(step + 1, loss=loss, samples=local * session.world_size)
    session.close()


if __name__ == "__main__":
    main()
