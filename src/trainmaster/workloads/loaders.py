"""One entry point for every workload the CLI accepts: `synthetic:N[:RATE]`, `ps:N[:RATE]` or a trace path.

`ps:N` generates parameter-server jobs (`workloads.ps_truth`) whose loss curves
end at a loss target; RATE is jobs per hour (default 20) for both generators.

A path's format is detected from its extension and header line:

- Pollux workload: header `name,time,application,num_replicas,batch_size`; profiles from
  `profiles=`, by default `<the CSV's grandparent>/profiles`;
- Philly jobs: header `timestamp,duration,num_gpus,gpu_time,cluster`;
- Tiresias jobs: header starting `job_id,num_gpu,submit_time,iterations,model_name,duration`;
- Gavel trace: extension `.trace`; throughputs from the nearest enclosing folder
  holding `simulation_throughputs.json`.
"""

from __future__ import annotations

from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.workloads.base import Workload
from trainmaster.workloads.gavel import load_gavel_trace
from trainmaster.workloads.philly import COLUMNS as PHILLY_COLUMNS
from trainmaster.workloads.philly import load_philly
from trainmaster.workloads.pollux import WORKLOAD_COLUMNS, load_pollux
from trainmaster.workloads.ps_truth import ps_workload
from trainmaster.workloads.synthetic import synthetic
from trainmaster.workloads.tiresias import COLUMNS as TIRESIAS_COLUMNS
from trainmaster.workloads.tiresias import load_tiresias_jobs

THROUGHPUTS = "simulation_throughputs.json"


GENERATED: dict[str, str] = {"synthetic": "synthetic", "ps": "parameter-server"}  # prefix -> what it makes


def _generated(text: str) -> tuple[str, int, float]:
    """(prefix, N, jobs per hour) of `PREFIX:N[:RATE]`, or a SpecError that shows the right form."""
    prefix, *parts = text.split(":")
    try:
        count = int(parts[0])
        rate = float(parts[1]) if len(parts) > 1 else 20.0
    except (ValueError, IndexError):
        count, rate = 0, 0.0
    if count <= 0 or not 0 < rate < float("inf") or len(parts) > 2:
        raise SpecError(
            "--workload",
            f"{text!r} is not a {GENERATED[prefix]} workload",
            f"write {prefix}:N or {prefix}:N:JOBS_PER_HOUR with N >= 1, e.g. {prefix}:200:20",
        )
    return prefix, count, rate


def _gavel_throughputs(trace: Path) -> Path:
    for folder in trace.resolve().parents:
        if (folder / THROUGHPUTS).is_file():
            return folder / THROUGHPUTS
    raise SpecError(
        str(trace),
        f"no {THROUGHPUTS} found beside the trace or above it",
        "keep the trace inside Gavel's folder that holds the throughputs file",
    )


def _header(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return [c.strip() for c in f.readline().strip().split(",")]


def load_workload(
    text: str,
    *,
    seed: int = 0,
    max_factor: float = 1.0,
    oracle: bool = False,
    limit: int | None = None,
    profiles: Path | None = None,
    fidelity: str = "default",
) -> Workload:
    """The workload `text` names (module doc), at most `limit` jobs (the earliest submitted).

    `max_factor > 1` makes Pollux jobs (and synthetic ones) elastic; PS jobs are
    always elastic within their roles' bounds. `oracle` puts the true runtime in
    `spec.estimate` (srtf's reference line) of trace jobs; synthetic jobs always
    carry one and PS jobs never do (their loss target decides). `seed` only
    matters for generated workloads; `fidelity` picks how Pollux jobs are modelled (`load_pollux`).
    """
    if limit is not None and limit <= 0:
        raise SpecError("--limit", f"{limit} is not a positive job count", "use at least 1")
    if text.split(":", 1)[0] in GENERATED and ":" in text:
        prefix, count, rate = _generated(text)
        if prefix == "ps":
            workload = ps_workload(count, rate_per_hour=rate, seed=seed)
        else:
            workload = synthetic(count, rate_per_hour=rate, seed=seed, elastic=max_factor > 1.0)
    else:
        path = Path(text)
        if not path.is_file():
            raise SpecError(
                "--workload",
                f"{text}: file not found",
                "pass a trace path (Pollux/Philly/Tiresias CSV or Gavel .trace), synthetic:N or ps:N",
            )
        if path.suffix == ".trace":
            workload = load_gavel_trace(path, _gavel_throughputs(path), oracle=oracle)
        else:
            header = _header(path)
            if set(WORKLOAD_COLUMNS) <= set(header):
                workload = load_pollux(
                    path, profiles or path.resolve().parent.parent / "profiles", max_factor=max_factor, oracle=oracle,
                    fidelity=fidelity,
                )
            elif header == PHILLY_COLUMNS:
                return load_philly(path, limit=limit, oracle=oracle)
            elif header[: len(TIRESIAS_COLUMNS)] == list(TIRESIAS_COLUMNS):
                workload = load_tiresias_jobs(path, oracle=oracle)
            else:
                raise SpecError(
                    "--workload",
                    f"{text}: unknown trace format (header {','.join(header)[:80]!r})",
                    "pass a Pollux workload, philly.csv, a Tiresias job CSV or a Gavel .trace",
                )
    if limit is not None and limit < len(workload):
        workload = Workload(name=f"{workload.name}-first{limit}", jobs=workload.jobs[:limit])
    return workload
