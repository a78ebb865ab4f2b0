"""Parameter-server training: an MLP on scikit-learn's digits, 2 workers and 1-2 parameter servers.

The same script runs both roles (TM_ROLE tells which). TM_PS_MODE=sync
averages one gradient per worker per step; async applies each as it comes.
Worker 0 seeds the servers from its model (restored from the checkpoint on a
restart) and saves checkpoints; every worker reports the same step count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

import trainmaster.train as tm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from digits.train import batch_indices, build_model, load_digits_tensors


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=int(os.environ.get("TM_TARGET_STEPS", "600")))
    p.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (demos, tests)")
    args = p.parse_args(argv)

    if os.environ.get("TM_ROLE") == "ps":
        code = tm.serve()
        sys.stdout.flush()
        os._exit(code)

    session = tm.init()
    torch.manual_seed(args.seed)
    model = build_model()
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
    servers = session.parameter_client(model, lr=args.lr)
    x, y = load_digits_tensors()
    for step in session.steps(args.steps, state=lambda: {"model": model.state_dict()}):
        idx = batch_indices(step, session.rank, args.batch, len(x), args.seed)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        model.zero_grad()
        loss.backward()
        servers.step()  # gradients out, new parameters in
        if args.step_time:
            time.sleep(args.step_time)
        session.report(step + 1, loss=loss, samples=args.batch * session.world_size)
    servers.close()
    session.close()


if __name__ == "__main__":
    main()
