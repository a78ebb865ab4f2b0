"""Microsoft Philly jobs (`pollux/philly.csv`): each runs its recorded duration on its GPU count.

Columns `timestamp,duration,num_gpus,gpu_time,cluster` (82,248 jobs, Sep-Dec
2017). Submit times are seconds after the earliest job of the selection; the
rows are not in time order in the file, so jobs are sorted by submit time
(ties keep file order). Built for speed: one pass with the csv module, and the
role mapping of each GPU count is shared between jobs.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.core.job import JobSpec, Role, RoleSpec
from trainmaster.core.resources import Resources
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob, check_length

_EPOCH = datetime(1970, 1, 1)  # naive: the trace's times are read as UTC, independent of the local zone
COLUMNS = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]


def load_philly(
    csv_path: Path, *, cluster_id: str | None = None, limit: int | None = None, oracle: bool = False
) -> Workload:
    """Philly jobs, optionally only one virtual cluster's and only the first `limit` by submit time.

    Each job asks for `num_gpus` one-GPU workers (fixed size, gang) and runs
    `duration` seconds at that size (`LinearTruth`). `oracle` sets
    `spec.estimate` to that duration.
    """
    path = Path(csv_path)
    try:
        f = path.open(newline="")
    except FileNotFoundError:
        raise SpecError(str(path), "file not found", "pass the path of pollux/philly.csv") from None
    rows: list[tuple[float, float, int]] = []
    with f:
        reader = csv.reader(f)
        header = next(reader, [])
        if header != COLUMNS:
            raise SpecError(str(path), "is not a Philly job list", f"expected the header {','.join(COLUMNS)}")
        parse = datetime.fromisoformat
        for n, row in enumerate(reader, start=2):
            if not row:
                continue
            if cluster_id is not None and row[4] != cluster_id:
                continue
            try:
                rows.append(((parse(row[0]) - _EPOCH).total_seconds(), float(row[1]), int(row[2])))
            except (ValueError, IndexError):
                raise SpecError(
                    f"{path}:{n}",
                    f"malformed row {','.join(row)!r}",
                    "each row needs timestamp,duration,num_gpus,gpu_time,cluster",
                ) from None
            check_length(f"{path}:{n}", rows[-1][1], rows[-1][2])
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    if limit is not None:
        order = order[:limit]
    if not order:
        where = f" for cluster {cluster_id!r}" if cluster_id else ""
        raise SpecError(str(path), f"has no jobs{where}", "check the file and the cluster id")
    start = rows[order[0]][0]
    roles: dict[int, Mapping[Role, RoleSpec]] = {}
    jobs: list[WorkloadJob] = []
    for i in order:
        submit, duration, gpus = rows[i]
        role = roles.get(gpus)
        if role is None:
            role = roles[gpus] = {Role.WORKER: RoleSpec(min=gpus, max=gpus, resources=Resources(gpu=1))}
        jid = f"philly-{i}"
        spec = JobSpec(name=jid, roles=role, job_type="philly", estimate=duration if oracle else None)
        jobs.append(WorkloadJob(jid, submit - start, spec, LinearTruth(duration=duration, gpus=gpus)))
    name = f"philly-{cluster_id}" if cluster_id else "philly"
    return Workload(name=f"{name}-{len(jobs)}", jobs=tuple(jobs))
