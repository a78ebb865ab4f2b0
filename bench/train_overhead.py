"""Cost of `trainmaster.train` in the step loop: the digits MLP with and without it, in one process.

All variants run the same step (examples/digits: sample a batch, forward,
backward, SGD step) on one thread:

- `plain`: the bare loop;
- `trainmaster`: `session.steps()` (stop checks, checkpoint timer) and
  `session.report()` every step with the loss tensor (read ten times a
  second, lines written about once a second), no periodic checkpoint;
- `+ckpt 1s`: the same with an atomic checkpoint (write, fsync, rename) of
  model and optimizer every second, far more often than a real job would.

Short rounds rotate through the variants so they share the background load
(the machine is shared); figures are medians of per-round ratios to `plain`,
in wall time and in this thread's CPU time (which excludes time spent
descheduled by other load).
The per-call costs of `report()` and `save()` are timed on their own too.

    .venv/bin/python -m bench.train_overhead [--steps 300] [--rounds 60]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from examples.digits.train import batch_indices, build_model, load_digits_tensors
from torch import nn

from trainmaster.train import Session, TaskEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300, help="steps per round")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = load_digits_tensors()
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(i: int) -> torch.Tensor:
        idx = batch_indices(i, 0, args.batch, len(x), 0)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    def state() -> dict[str, object]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def plain() -> None:
        for i in range(args.steps):
            step(i)

    def managed(session: Session) -> Callable[[], None]:
        """One long job's step loop, consumed a round at a time (so its final checkpoint is not timed)."""
        steps = session.steps((args.rounds + 1) * args.steps + 1, state=state)

        def run() -> None:
            for i in itertools.islice(steps, args.steps):
                loss = step(i)
                session.report(i + 1, loss=loss, samples=args.batch)

        return run

    with tempfile.TemporaryDirectory() as tmp:

        def session(every: float, name: str) -> Session:
            return Session(
                TaskEnv(
                    checkpoint_dir=str(Path(tmp) / name),
                    report_file=str(Path(tmp) / f"{name}.jsonl"),
                    checkpoint_every=every,
                )
            )

        variants: dict[str, Callable[[], None]] = {
            "plain": plain,
            "trainmaster": managed(session(1e9, "none")),
            "+ckpt 1s": managed(session(1.0, "often")),
        }
        for run in variants.values():
            run()  # warm-up
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                start, start_cpu = time.perf_counter(), time.thread_time()
                variants[name]()
                cpu[name].append(time.thread_time() - start_cpu)
                seconds[name].append(time.perf_counter() - start)
        probe = session(1e9, "probe")
        calls = 200_000
        start = time.perf_counter()
        for i in range(calls):
            probe.report(i, loss=0.5, samples=64)
        report_us = (time.perf_counter() - start) / calls * 1e6
        saves = []
        for _ in range(20):
            start = time.perf_counter()
            probe.save(state(), 0)
            saves.append(time.perf_counter() - start)
        save_ms = statistics.median(saves) * 1e3
    print(f"{args.rounds} rounds of {args.steps} steps, batch {args.batch}, 1 thread")
    print("variant       wall steps/s   ratio to plain (median, quartiles)   CPU us/step   CPU ratio (median)")
    for name in names:
        ratios = sorted(a / b for a, b in zip(seconds["plain"], seconds[name], strict=True))
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu["plain"], cpu[name], strict=True))
        q = len(ratios) // 4
        rate = args.steps / statistics.median(seconds[name])
        per_step = statistics.median(cpu[name]) / args.steps * 1e6
        print(
            f"{name:12s}  {rate:12.0f}   {statistics.median(ratios):.3f} "
            f"({ratios[q]:.3f} .. {ratios[len(ratios) - 1 - q]:.3f})          {per_step:11.0f}   {cpu_ratio:.3f}"
        )
    print(f"report(): {report_us:.2f} us per call; save() of model + optimizer: {save_ms:.2f} ms (median of 20)")


if __name__ == "__main__":
    main()
