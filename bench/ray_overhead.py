"""The ray engine's overhead against the local engine, measured in one run on this machine.

Both engines run the same digits MLP (one core per worker); the Ray side is a
3-node Ray cluster started here (`local_ray_cluster`, loopback), each task a
Ray actor. Per round and engine, timed by the events the engine reports:

- first step: START applied -> the job's first progress report (actor or
  process start, `import torch`, rendezvous);
- steps/s: the median of the rates the job reports over `--train` seconds at
  one worker (the task's training speed under its supervisor);
- resize: RESIZE 1 -> 2 workers (two nodes) applied -> the first report at
  the new size (checkpoint, stop, start, restore).

Rounds alternate local and Ray so that load from elsewhere hits both alike;
the ratios Ray / local of the medians are the figures.

    .venv/bin/python -m bench.ray_overhead [--rounds 3] [--train 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Event, JobFinished, JobRunning, Report, TaskFailed
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.spec import job_from_mapping
from trainmaster.engines.gang import GangEngine
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.engines.local.machine import local_cluster
from trainmaster.engines.ray.engine import RayEngine
from trainmaster.engines.ray.localcluster import local_ray_cluster

ROOT = Path(__file__).resolve().parents[1]
SILENT_NEVER = 3600.0  # seconds


def spec() -> JobSpec:
    return job_from_mapping({
        "apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "digits"},
        "spec": {"command": ["python", "examples/digits/train.py"], "target": {"steps": 10_000_000},
                 "checkpoint": {"every": "300s"},
                 "roles": {"worker": {"min": 1, "max": 2, "resources": {"cpu": "1"}}}}})


def until(engine: GangEngine, done: type[Event], timeout: float = 600.0) -> Event:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in engine.wait(0.05):
            if isinstance(event, JobFinished | TaskFailed):
                raise RuntimeError(str(event))
            if isinstance(event, done):
                return event
    raise RuntimeError(f"no {done.__name__} within {timeout:g}s")


def measure(engine: GangEngine, nodes: tuple[str, str], job: str, train: float) -> tuple[float, float, float]:
    """(first step s, steps/s at one worker, resize s) of one run of the job."""
    job_spec = spec()
    started = time.monotonic()
    engine.apply([Action(ActionKind.START, job, job_spec, Allocation.of([Placement(Role.WORKER, nodes[0])]))])
    until(engine, JobRunning)
    first = time.monotonic() - started
    rates: list[float] = []
    end = time.monotonic() + train
    while time.monotonic() < end:
        rates.extend(e.steps_per_s for e in engine.wait(0.2) if isinstance(e, Report) and e.steps_per_s)
    decided = time.monotonic()
    engine.apply([Action(ActionKind.RESIZE, job, job_spec,
                         Allocation.of([Placement(Role.WORKER, n) for n in nodes]))])
    until(engine, JobRunning)
    resize = time.monotonic() - decided
    engine.apply([Action(ActionKind.STOP, job, job_spec, Allocation.of([]))])
    return first, statistics.median(rates[len(rates) // 4:]), resize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train", type=float, default=20.0, help="seconds of training at one worker per run")
    args = p.parse_args()
    rows: dict[str, list[tuple[float, float, float]]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp, local_ray_cluster(3) as cluster:
        # `JobRunning` only on the first progress report: never the engines' "running although silent" fallback
        # (30 s), which a loaded machine reaches before `import torch` is done.
        local = LocalEngine(local_cluster(2, cpus_per_node=1), run_dir=Path(tmp) / "local", base_dir=ROOT, grace=15,
                            silent_running_after=SILENT_NEVER)
        ray_engine = RayEngine(run_dir=Path(tmp) / "ray", address=cluster.address, base_dir=ROOT, grace=15,
                               namespace="bench", silent_running_after=SILENT_NEVER)
        try:
            print("round  engine  first step s  steps/s  resize 1->2 s")
            for r in range(args.rounds):
                for name, engine, nodes in (("local", local, ("local-0", "local-1")),
                                            ("ray", ray_engine, ("n1", "n2"))):
                    row = measure(engine, nodes, f"digits-{r}", args.train)
                    rows[name].append(row)
                    print(f"{r:5d}  {name:6s}  {row[0]:12.2f}  {row[1]:7.1f}  {row[2]:13.2f}", flush=True)
        finally:
            local.close(grace=5)
            ray_engine.close(grace=5)
    med = {name: [statistics.median(x[i] for x in values) for i in range(3)] for name, values in rows.items()}
    for i, what in enumerate(("first step s", "steps/s", "resize 1->2 s")):
        print(f"{what:15s} local {med['local'][i]:7.2f}  ray {med['ray'][i]:7.2f}  "
              f"ray/local {med['ray'][i] / med['local'][i]:.3f}")


if __name__ == "__main__":
    main()
