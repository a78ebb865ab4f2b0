"""Pollux-format workloads drawn afresh from the Philly trace: more workloads "of the same format".

Pollux (OSDI'21, section 5.1; `simulator/workload.py` of petuum/adaptdl) built
its eight workloads by sampling Philly jobs submitted within an 8-hour window of
the day and giving each an application by the GPU-hours it used. We follow the
same recipe with our own seeds:

- keep jobs that ran at least 60 s and used under 1,000 GPU-hours;
- keep those submitted between `start` and `start + hours` o'clock (any day);
  the submit second is the time of day since `start`;
- sample `jobs` of them; by GPU-hours: under 1 -> cifar10 or ncf (a coin),
  1-10 -> deepspeech2 or bert (a coin; the peer turns half its deepspeech2
  jobs into bert), 10-100 -> yolov3, more -> imagenet;
- replicas and batch size: one of the pairs Pollux's workloads 1-8 submit for
  that application (`CONFIGS`, counted from `pollux/workloads/*.csv`), uniformly.
  The peer picks among configurations with 50-80% scaling efficiency; these are
  the pairs that rule produced.

The result goes through `pollux_jobs`, so both fidelity modes apply.
"""

from __future__ import annotations

import csv
import random
from datetime import datetime
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.workloads.base import Workload
from trainmaster.workloads.philly import COLUMNS
from trainmaster.workloads.pollux import pollux_jobs

CONFIGS: dict[str, tuple[tuple[int, int], ...]] = {  # (num_replicas, batch_size) in Pollux's workloads 1-8
    "cifar10": ((6, 2048), (8, 2048), (12, 4096), (16, 4096)),
    "ncf": ((1, 32768),),
    "deepspeech2": ((6, 320), (8, 320), (12, 640)),
    "bert": ((6, 384), (8, 384), (12, 384), (16, 384)),
    "yolov3": ((4, 64),),
    "imagenet": ((24, 3200), (32, 6400), (48, 6400)),
}
HOUR = 3600.0


def _application(gpu_seconds: float, rng: random.Random) -> str:
    if gpu_seconds < 1 * HOUR:
        return rng.choice(("cifar10", "ncf"))
    if gpu_seconds < 10 * HOUR:
        return rng.choice(("deepspeech2", "bert"))
    if gpu_seconds < 100 * HOUR:
        return "yolov3"
    return "imagenet"


def philly_rows(philly_csv: Path, *, jobs: int = 160, seed: int = 0, start: int = 2,
                hours: int = 8) -> list[dict[str, str]]:
    """Pollux workload rows (`name,time,application,num_replicas,batch_size`) sampled from Philly (module doc)."""
    if jobs <= 0 or not 0 < hours <= 24:
        raise SpecError("philly workload", f"{jobs} jobs over {hours} h", "ask for 1 or more jobs over 1-24 hours")
    if not Path(philly_csv).is_file():
        raise SpecError(str(philly_csv), "file not found", "pass the path of pollux/philly.csv")
    pool: list[tuple[float, float]] = []  # (second of the window, GPU-seconds)
    with Path(philly_csv).open(newline="") as f:
        reader = csv.reader(f)
        if next(reader, []) != COLUMNS:
            raise SpecError(str(philly_csv), "is not a Philly job list", f"expected the header {','.join(COLUMNS)}")
        for n, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                when, duration, gpu_seconds = datetime.fromisoformat(row[0]), float(row[1]), float(row[3])
            except (ValueError, IndexError):
                raise SpecError(f"{philly_csv}:{n}", f"malformed row {','.join(row)[:80]!r}",
                                "each row needs timestamp,duration,num_gpus,gpu_time,cluster") from None
            if duration < 60 or gpu_seconds >= 1000 * HOUR:
                continue
            second = ((when.hour - start) % 24) * HOUR + when.minute * 60 + when.second
            if second < hours * HOUR:
                pool.append((second, gpu_seconds))
    if len(pool) < jobs:
        raise SpecError(str(philly_csv), f"has {len(pool)} jobs in the window, fewer than {jobs}", "ask for fewer")
    rng = random.Random(seed)
    picked = sorted(rng.sample(pool, jobs))
    rows = []
    for i, (second, gpu_seconds) in enumerate(picked):
        app = _application(gpu_seconds, rng)
        replicas, batch = rng.choice(CONFIGS[app])
        rows.append({"name": f"{app}-{i}", "time": str(int(second)), "application": app,
                     "num_replicas": str(replicas), "batch_size": str(batch)})
    return rows


def philly_pollux(philly_csv: Path, profiles_dir: Path, *, jobs: int = 160, seed: int = 0, max_factor: float = 1.0,
                  oracle: bool = False, fidelity: str = "default") -> Workload:
    """A Pollux-format workload sampled from Philly with `seed` (module doc), modelled like `load_pollux`'s."""
    rows = philly_rows(philly_csv, jobs=jobs, seed=seed)
    built = pollux_jobs(rows, f"philly-pollux seed {seed}", profiles_dir, max_factor=max_factor, oracle=oracle,
                        fidelity=fidelity)
    return Workload(name=f"philly-pollux-{jobs}-seed{seed}", jobs=built)
