"""The Tiresias (NSDI'19) 60-job testbed trace: each job runs its recorded duration on its GPUs.

Columns `job_id,num_gpu,submit_time,iterations,model_name,duration,interval`
(`interval` is the gap to the previous arrival; `submit_time` already sums it).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.core.job import simple_job
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob, check_length

COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration")


def load_tiresias_jobs(csv_path: Path, *, oracle: bool = False) -> Workload:
    """Fixed-size gang jobs of `num_gpu` one-GPU workers lasting `duration` seconds (`LinearTruth`).

    `spec.job_type` is the model name; `oracle` sets `spec.estimate` to the duration.
    """
    path = Path(csv_path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise SpecError(str(path), "file not found", "pass the path of tiresias/60_job.csv") from None
    if not rows or not set(COLUMNS) <= set(rows[0]):
        raise SpecError(str(path), "is not a Tiresias job trace", f"expected the columns {','.join(COLUMNS)}")
    jobs = []
    for n, row in enumerate(rows, start=2):
        try:
            gpus, submit, duration = int(row["num_gpu"]), float(row["submit_time"]), float(row["duration"])
        except ValueError:
            raise SpecError(f"{path}:{n}", "num_gpu, submit_time and duration must be numbers", "fix the row") from None
        check_length(f"{path}:{n}", duration, gpus, ("duration", "num_gpu"))
        if not math.isfinite(submit):
            raise SpecError(f"{path}:{n}", f"submit_time {submit!r} is out of range", "submit_time must be finite")
        jid = f"tiresias-{row['job_id']}"
        spec = simple_job(jid, gpus, job_type=row["model_name"], estimate=duration if oracle else None)
        jobs.append(WorkloadJob(jid, submit, spec, LinearTruth(duration=duration, gpus=gpus)))
    jobs.sort(key=lambda j: j.submit_time)
    return Workload(name=f"tiresias-{path.stem}", jobs=tuple(jobs))
