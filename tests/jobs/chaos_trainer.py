"""A real torch trainer for the chaos test: logs every step, checkpoint and run, so a checker can prove
that no step ran twice past its checkpoint and no two runs of one job overlapped.

`python chaos_trainer.py STEPS STEP_TIME CKPT_EVERY`. Rank 0 appends to
`<job dir>/steps.log`: `<time> <pid> start <step>`, `... step <k>`,
`... ckpt <k>` (written after the checkpoint is durable: steps below k are
saved), `... done`. Checkpoints are explicit, every CKPT_EVERY steps; on
SIGTERM the library stops at a step boundary without a new one.
"""

from __future__ import annotations

import os
import sys
import time

import torch

import trainmaster.train as tm


def main() -> None:
    steps, step_time, every = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    session = tm.init()
    torch.manual_seed(0)
    raw = torch.nn.Linear(8, 1)
    state = session.restore()
    if state is not None:
        raw.load_state_dict(state["model"])
    model = session.wrap(raw)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path = os.path.join(os.path.dirname(os.environ["TM_CHECKPOINT_DIR"]), "steps.log")
    out = open(path, "a") if session.is_chief else None  # noqa: SIM115 (open for the whole run)

    def log(text: str) -> None:
        if out is not None:
            out.write(f"{time.time():.6f} {os.getpid()} {text}\n")
            out.flush()

    log(f"start {session.start_step}")
    for step in session.steps(steps):
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(step_time)
        log(f"step {step}")
        if (step + 1) % every == 0 or step + 1 == steps:
            session.save({"model": raw.state_dict()}, step + 1)
            log(f"ckpt {step + 1}")
        session.report(step + 1, loss=float(loss))
    log("done")
    session.close()


if __name__ == "__main__":
    main()
