"""A real trainer that pauses at one step until the test says go, so a test can act while it is surely running.

`python gated_trainer.py STEPS PAUSE_AT GO_FILE [STEP_TIME]`: digits' MLP
(examples/digits), all-reduce or parameter servers (TM_ROLE=ps serves). At
step PAUSE_AT every worker waits until GO_FILE exists, or until a stop is
asked for (the library then checkpoints at this step and exits); the attempt
that finds GO_FILE trains to the end. No timing: the test creates GO_FILE.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

import trainmaster.train as tm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from digits.train import batch_indices, build_model, load_digits_tensors


def main() -> None:
    steps, pause, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    step_time = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    if os.environ.get("TM_ROLE") == "ps":
        code = tm.serve()
        sys.stdout.flush()
        os._exit(code)
    session = tm.init()
    torch.manual_seed(0)
    model = build_model()
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
    ps = session.env.architecture != "allreduce"
    servers = session.parameter_client(model, lr=0.1) if ps else None
    net = model if ps else session.wrap(model)
    opt = None if ps else torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = load_digits_tensors()
    for step in session.steps(steps, state=lambda: {"model": model.state_dict()}):
        if step == pause:
            print(f"gated: waiting at step {step}", flush=True)
            while not go.exists() and not session.stopping:
                time.sleep(0.05)
        idx = batch_indices(step, session.rank, 32, len(x), 0)
        loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
        if servers is not None:
            model.zero_grad()
            loss.backward()
            servers.step()
        else:
            assert opt is not None
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step_time:
            time.sleep(step_time)
        session.report(step + 1, loss=loss, samples=32 * session.world_size)
    if servers is not None:
        servers.close()
    session.close()


if __name__ == "__main__":
    main()
