"""Gavel (OSDI'20) traces with Gavel's measured throughputs: speed depends on the GPU type.

Traces are tab-separated, one job per line, in two formats:

- physical cluster (10 fields): `job_type, command, working_dir, num_steps_arg,
  needs_data_dir, total_steps, scale_factor, priority_weight, SLO, arrival_time`;
- philly-vc (7 fields): `job_type, command, num_steps_arg, needs_data_dir,
  total_steps, arrival_time, scale_factor`.

Throughputs (`simulation_throughputs.json`) are steps per second of the whole
job: `{gpu_type: {"('<job_type>', scale)": {"null": steps_per_s, ...}}}` for
k80, p100, v100, plus `<type>_unconsolidated` for a job spread over several
servers. A job runs at the throughput of its slowest GPU type among the nodes
it holds (synchronous training waits for the slowest worker), using the
unconsolidated figure when its tasks span more than one node (the consolidated
one where the table has no unconsolidated figure for that scale: most K80 rows). A GPU type the
table does not know (e.g. the shorthand's generic `gpu`) counts as `v100`,
Gavel's reference type. Holding a GPU count the table has no entry for scales
the requested scale's throughput linearly.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.core.job import JobSpec, simple_job
from trainmaster.workloads.base import Workload, WorkloadJob

DEFAULT_GPU_TYPE = "v100"
Throughputs = Mapping[str, Mapping[tuple[str, int], float]]  # gpu type -> (job type, scale) -> steps/s


@lru_cache(maxsize=4)
def load_throughputs(path: Path) -> Throughputs:
    """Isolated throughputs (the `"null"` entries) per GPU type, job type and scale."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(
            str(path), "file not found", "pass gavel/simulation_throughputs.json (or physical_cluster_throughputs.json)"
        ) from None
    except json.JSONDecodeError as e:
        raise SpecError(
            str(path), f"is not JSON ({e.msg} at line {e.lineno})", "pass Gavel's throughputs file"
        ) from None
    out: dict[str, dict[tuple[str, int], float]] = {}
    for gpu, table in doc.items():
        entries: dict[tuple[str, int], float] = {}
        for key, value in table.items():
            job_type, scale = ast.literal_eval(key)
            entries[(str(job_type), int(scale))] = float(value["null"])
        out[gpu.lower()] = entries
    return out


@dataclass(frozen=True)
class GavelTruth:
    """A Gavel job: `total_steps` steps of `job_type`, requested on `scale` GPUs."""

    job_type: str
    scale: int
    steps: float
    throughputs: Throughputs

    @property
    def total_steps(self) -> float:
        return self.steps

    def throughput(self, gpu_type: str, gpus: int, consolidated: bool = True) -> float:
        """Steps per second on `gpus` GPUs of one type (0 when the type never ran this job)."""
        kind = gpu_type if gpu_type in self.throughputs else DEFAULT_GPU_TYPE
        home = self.throughputs[kind]
        spread = None if consolidated else self.throughputs.get(f"{kind}_unconsolidated", {}).get((self.job_type, gpus))
        value = spread if spread is not None else home.get((self.job_type, gpus))
        if value is None:  # scale linearly from the requested scale, else from the nearest measured one
            known = sorted((abs(s - gpus), s) for (j, s) in home if j == self.job_type)
            ref = self.scale if (self.job_type, self.scale) in home else (known[0][1] if known else self.scale)
            value = home.get((self.job_type, ref), 0.0) * gpus / ref
        return value

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        gpus = alloc.gpus(spec)
        if gpus <= 0:
            return 0.0
        types = {DEFAULT_GPU_TYPE}
        if cluster is not None:
            types = {(cluster.node(n).gpu_type or DEFAULT_GPU_TYPE).lower() for n in alloc.nodes if n in cluster}
        consolidated = alloc.on_one_node or not alloc
        return min(self.throughput(t, gpus, consolidated) for t in types or {DEFAULT_GPU_TYPE})

    def loss(self, step: float) -> float | None:
        return None


def _parse_line(fields: list[str], where: str) -> tuple[str, float, int, float]:
    """(job_type, total_steps, scale_factor, arrival_time) from either trace format."""
    try:
        if len(fields) == 10:
            return fields[0], float(fields[5]), int(fields[6]), float(fields[9])
        if len(fields) == 7:
            return fields[0], float(fields[4]), int(fields[6]), float(fields[5])
    except ValueError:
        pass
    raise SpecError(
        where,
        f"not a Gavel trace line ({len(fields)} tab-separated fields)",
        "use a Gavel .trace file (10 fields, or the 7-field philly-vc format)",
    )


def _fits_on(truth: GavelTruth, table: Throughputs) -> tuple[str, ...]:
    """The GPU types the job fits on, when it does not fit on all (else empty: any).

    Gavel marks a job that does not fit in a GPU type's memory with throughput 0
    (ResNet-50 at batch 128 on 2+ K80s). Its user knows that and says so with
    `requireGpuTypes`; without it the job would hang at 0 steps/s in the simulator.
    """
    types = tuple(t for t in table if not t.endswith("_unconsolidated"))
    fits = tuple(t for t in types if truth.throughput(t, truth.scale) > 0)
    return () if len(fits) == len(types) else fits


def load_gavel_trace(trace: Path, throughputs_json: Path, *, oracle: bool = False) -> Workload:
    """Jobs of a Gavel trace; each holds `scale_factor` one-GPU workers (fixed size, gang).

    `spec.job_type` is Gavel's job type (e.g. `ResNet-50 (batch size 64)`);
    `oracle` sets `spec.estimate` to the runtime on consolidated V100s.
    """
    path = Path(trace)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise SpecError(str(path), "file not found", "pass a Gavel .trace file") from None
    table = load_throughputs(Path(throughputs_json))
    jobs: list[WorkloadJob] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        job_type, steps, scale, arrival = _parse_line(line.split("\t"), f"{path}:{n}")
        if not any((job_type, scale) in t or (job_type, 1) in t for t in table.values()):
            raise SpecError(
                f"{path}:{n}",
                f"no throughput for job type {job_type!r}",
                "use the throughputs file that matches this trace",
            )
        truth = GavelTruth(job_type, scale, steps, table)
        jid = f"gavel-{len(jobs)}"
        estimate = None
        if oracle:
            speed = truth.throughput(DEFAULT_GPU_TYPE, scale)
            estimate = steps / speed if speed > 0 else None
        spec = simple_job(jid, scale, job_type=job_type, estimate=estimate, require_gpu_types=_fits_on(truth, table))
        jobs.append(WorkloadJob(jid, arrival, spec, truth))
    if not jobs:
        raise SpecError(str(path), "has no jobs", "pass a non-empty Gavel trace")
    jobs.sort(key=lambda j: j.submit_time)
    return Workload(name=f"gavel-{path.stem}", jobs=tuple(jobs))
