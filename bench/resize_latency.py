"""Resize latency of real jobs on the local engine: from the decision to the first step at the new size.

For each example job (digits MLP 1 -> 2 -> 1 workers, synthetic CNN
1 -> 2 -> 4 -> 1) the job trains, then a RESIZE is applied (what the
controller does the moment a policy decides). Measured per resize:

- stop: decision -> every old task has checkpointed and exited (SIGTERM,
  stop agreed at a step boundary, atomic save) and the new tasks are launched;
- start: launch -> the first step at the new size has completed (process
  start, `import torch`, rendezvous, restore) as stamped in the job's report;
- total: decision -> first step at the new size.

With `--prestart 0,4` it compares plain process starts with the engine's
pool of interpreters that have torch imported already (`prestart=4`).

    .venv/bin/python -m bench.resize_latency [--repeat 2] [--prestart 0,4]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import JobFinished, Report, TaskFailed
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.spec import job_from_mapping
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.engines.local.machine import local_cluster

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    "digits-mlp": (["python", "examples/digits/train.py", "--step-time", "0.005"], "1", [1, 2, 1]),
    "synthetic-cnn": (["python", "examples/cnn/train.py"], "500m", [1, 2, 4, 1]),
}


def spec_for(name: str) -> JobSpec:
    command, cpu, sizes = JOBS[name]
    return job_from_mapping(
        {
            "apiVersion": "trainmaster/v1",
            "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {
                "command": command,
                "target": {"steps": 1_000_000},
                "checkpoint": {"every": "300s"},
                "roles": {"worker": {"min": 1, "max": max(sizes), "resources": {"cpu": cpu}}},
            },
        }
    )


def first_step_time(engine: LocalEngine, job: str, attempt: int) -> float | None:
    path = engine.job_dir(job) / "reports" / f"attempt-{attempt}.jsonl"
    if not path.is_file():
        return None
    line = path.read_text().split("\n", 1)[0]
    return float(json.loads(line)["t"]) if line.strip() else None


def run(name: str, run_dir: Path, prestart: int) -> list[tuple[str, float, float, float]]:
    _, _, sizes = JOBS[name]
    engine = LocalEngine(local_cluster(1, cpus_per_node=2), run_dir=run_dir, base_dir=ROOT, prestart=prestart)
    spec = spec_for(name)
    rows = []
    try:
        attempt = 1
        engine.apply([Action(ActionKind.START, name, spec, Allocation.of([Placement(Role.WORKER, "local")]))])
        for before, after in itertools.pairwise(sizes):
            seen: list[int] = []
            since = time.monotonic()
            while not seen or seen[-1] - seen[0] < 50 or time.monotonic() - since < 5:  # train a while at this size
                for event in engine.wait(0.2):
                    if isinstance(event, JobFinished | TaskFailed):
                        raise RuntimeError(f"{name}: {event}")
                    if isinstance(event, Report):
                        seen.append(event.step)
            decided = time.time()
            engine.apply(
                [Action(ActionKind.RESIZE, name, spec, Allocation.of([Placement(Role.WORKER, "local")] * after))]
            )
            launched = None
            attempt += 1
            while (first := first_step_time(engine, name, attempt)) is None:
                engine.wait(0.02)
                if launched is None and any(t.attempt == attempt for t in engine.tasks(name)):
                    launched = time.time()
            assert launched is not None
            rows.append((f"{before} -> {after}", launched - decided, first - launched, first - decided))
    finally:
        engine.close(grace=5)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--prestart", default="0,4", help="comma-separated numbers of pre-started interpreters to compare")
    args = p.parse_args()
    print("prestart  job            resize   stop s  start s  total s")
    totals: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for prestart in (int(x) for x in args.prestart.split(",")):
                for name in JOBS:
                    for label, stop, start, total in run(name, Path(tmp) / f"{rep}-{prestart}", prestart):
                        totals.setdefault(prestart, []).append(total)
                        print(f"{prestart:8d}  {name:14s} {label:7s}  {stop:6.2f}  {start:7.2f}  {total:7.2f}")
    for prestart, values in totals.items():
        print(
            f"prestart {prestart}: median total {statistics.median(values):.2f} s, max {max(values):.2f} s "
            f"over {len(values)} resizes"
        )


if __name__ == "__main__":
    main()
