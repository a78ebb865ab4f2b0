"""An MLP on scikit-learn's digits, data parallel with all-reduce, through `trainmaster.train`.

Run alone (`python examples/digits/train.py`) or as a job (`examples/digits/job.yaml`).
The global batch is kept when the world size changes (each worker takes
its share); a restart resumes from the checkpoint's step.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import time
from pathlib import Path

import torch
from torch import nn

import trainmaster.train as tm


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 8x8 digits, read from the CSV it ships (no download).

    The file is read directly rather than through `sklearn.datasets.load_digits`,
    which would cost every (re)started task about a second of imports.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the digits example needs scikit-learn (pip install scikit-learn)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        rows = torch.tensor([[float(v) for v in line.split(",")] for line in f if line.strip()])
    return rows[:, :64] / 16.0, rows[:, 64].long()


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def batch_indices(step: int, rank: int, size: int, n: int, seed: int) -> torch.Tensor:
    """A deterministic sample per (step, rank): a resumed run sees the data it would have seen."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    return torch.randint(0, n, (size,), generator=g)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=int(os.environ.get("TM_TARGET_STEPS", "600")))
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds per step, to stand in for a heavier model in demos and tests")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    session = tm.init()
    torch.manual_seed(args.seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    net = session.wrap(model)
    x, y = (t.to(session.device) for t in load_digits_tensors())
    local = session.local_batch_size(args.batch)
    for step in session.steps(args.steps, state=lambda: {"model": model.state_dict(),
                                                          "optimizer": optimizer.state_dict()}):
        idx = batch_indices(step, session.rank, local, len(x), args.seed).to(session.device)
        loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_time:
            time.sleep(args.step_time)
        session.report(step + 1, loss=loss, samples=local * session.world_size)
    session.close()


if __name__ == "__main__":
    main()
