"""Pollux (OSDI'21) workloads and application profiles: job length and placement-dependent speed.

A workload CSV (`pollux/workloads*/workload-N.csv`, columns
`name,time,application,num_replicas,batch_size`) lists jobs; each worker is one
GPU. The ground truth of a job comes from `profiles/<application>/`:

- **length**: the `iteration` of the last row of `validation-<batch_size>.csv`
  (optimizer steps at that global batch size until the final epoch);
- **speed**: one step with `r` replicas takes the `step_time` of
  `placements.csv` for the job's placement at local batch `ceil(B / r)`,
  interpolated linearly between measured local batch sizes (see `StepCurve`);
- **loss**: a decreasing curve derived from the validation metric (see `LossCurve`).

Placement strings. `placements.csv` names a placement by the GPUs per node as a
digit string, written as the lexicographically smallest rotation of the
per-node counts (all 108 such necklaces of 1-4 nodes with 1-4 GPUs are in the
file; e.g. 2 GPUs on n0 and 1 on n1 is `12`). Nodes are ordered by name with
numbers compared numerically (`n2` before `n10`), as the cluster lists them.

Fallbacks when the exact placement was not measured (`Profile.step_time`):

1. a node holding more than 4 replicas or more than 4 nodes -> `Profile.anchor_time`:
   for 1-4 nodes, the evenly spread placement with the same node count and
   `min(r, 4 * nodes)` replicas (bigger nodes than the profiled 4-GPU ones are
   assumed to sync like a full profiled node), at the job's real local batch;
2. for more than 4 nodes, `scalability.csv` (`num_nodes,num_replicas,...`,
   measured at 6, 8, 12 and 16 nodes): linear in replicas at the nearest
   measured node counts, then linear in node count between them (4 nodes come
   from rule 1); more than 16 nodes use 16.

Local batch outside the measured range: below the smallest measured local batch
the smallest's step time is used (a step never gets cheaper than measured);
above the largest, gradient accumulation runs `k = ceil(b / largest)`
micro-steps of `b / k` each, and only the last one syncs:
`k * step_time - (k - 1) * sync_time` (as Pollux's own simulator does).

Only the sim engine reads a `PolluxTruth`; policies see the spec and the jobs' reports.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.core.job import BatchRange, JobSpec, Role, Target, simple_job
from trainmaster.workloads.base import Workload, WorkloadJob

if TYPE_CHECKING:
    from trainmaster.workloads.pollux_peer import PeerTruth

PROFILED_GPUS_PER_NODE = 4  # AWS g4dn.12xlarge: 4 x T4 (README of the Pollux artifact)
SCALABILITY_MAX_NODES = 16
WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear interpolation on sorted `xs`, clamped at both ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class StepCurve:
    """Step and sync time against local batch size for one placement (sorted by local batch)."""

    local_bsz: tuple[float, ...]
    step_time: tuple[float, ...]
    sync_time: tuple[float, ...]

    def time(self, local_bsz: float) -> float:
        """Seconds per optimizer step at `local_bsz` per replica, accumulating gradients past the largest."""
        largest = self.local_bsz[-1]
        k = max(1, math.ceil(local_bsz / largest - 1e-9))
        micro = local_bsz / k
        step = _interp(self.local_bsz, self.step_time, micro)
        sync = _interp(self.local_bsz, self.sync_time, micro)
        return k * step - (k - 1) * sync


def _curves(rows: Iterable[tuple[object, float, float, float]]) -> dict[object, StepCurve]:
    grouped: dict[object, list[tuple[float, float, float]]] = {}
    for key, bsz, step, sync in rows:
        grouped.setdefault(key, []).append((bsz, step, sync))
    out: dict[object, StepCurve] = {}
    for key, points in grouped.items():
        merged: dict[float, list[tuple[float, float]]] = {}
        for bsz, step, sync in points:  # repeated measurements of one local batch: average them
            merged.setdefault(bsz, []).append((step, sync))
        xs = sorted(merged)
        out[key] = StepCurve(
            tuple(xs),
            tuple(sum(s for s, _ in merged[x]) / len(merged[x]) for x in xs),
            tuple(sum(s for _, s in merged[x]) / len(merged[x]) for x in xs),
        )
    return out


def canonical_placement(counts: Sequence[int]) -> str:
    """The digit string `placements.csv` uses: the smallest rotation of the per-node counts.

    A node with 10 or more replicas has no digit; such placements get a key no
    measurement has (`x` and comma-separated counts), so they take the fallback.
    """
    used = tuple(c for c in counts if c > 0)
    if not used:
        return ""
    smallest = min(used[i:] + used[:i] for i in range(len(used)))
    if smallest and max(smallest) > 9:
        return "x" + ",".join(map(str, smallest))
    return "".join(map(str, smallest))


def _even_counts(nodes: int, replicas: int) -> list[int]:
    base, extra = divmod(replicas, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


@dataclass(frozen=True)
class LossCurve:
    """A decreasing, loss-like curve over steps, derived from the validation metric.

    `metric` is validation accuracy/F1 (higher is better: cifar10, imagenet, ncf,
    bert) or an error (lower is better: deepspeech2 WER, yolov3 loss); the
    direction is read from the first and last epochs. Higher-is-better metrics
    become `scale - metric` (scale 1 for fractions, 100 for percentages). A
    running minimum keeps the curve non-increasing, and step 0 is extrapolated
    to `2 * first - last` so the first epoch shows progress too. Between epochs
    the curve is linear in steps.
    """

    steps: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def from_metric(cls, iterations: Sequence[float], metric: Sequence[float]) -> LossCurve:
        higher_better = metric[-1] > metric[0]
        scale = 1.0 if max(metric) <= 1.0 else 100.0
        raw = [scale - m if higher_better else m for m in metric]
        values: list[float] = []
        for v in raw:
            values.append(min(v, values[-1]) if values else v)
        start = max(values[0], 2 * values[0] - values[-1])
        return cls((0.0, *iterations), (start, *values))

    def __call__(self, step: float) -> float:
        return _interp(self.steps, self.values, step)


@dataclass(frozen=True)
class Validation:
    """One `validation-<bsz>.csv`: optimizer steps per epoch and the metric after each."""

    batch_size: int
    iterations: tuple[float, ...]
    metric: tuple[float, ...]
    progress: tuple[float, ...] = ()  # per epoch: steps of the smallest validated batch (Pollux's simulator)
    grad_sqr: tuple[float, ...] = ()  # per epoch: gradient square norm and variance (the gradient noise scale)
    grad_var: tuple[float, ...] = ()

    @property
    def total_steps(self) -> float:
        return self.iterations[-1]

    @property
    def epochs(self) -> int:
        return len(self.iterations)


@dataclass(frozen=True)
class Profile:
    """One application's measurements: step time per placement and scale, and validation runs."""

    app: str
    placements: Mapping[str, StepCurve]
    scalability: Mapping[tuple[int, int], StepCurve]
    validation: Mapping[int, Validation]
    _memo: dict[tuple[str, int], float] = field(default_factory=dict, compare=False, repr=False)

    def step_time(self, counts: Sequence[int], batch_size: int) -> float:
        """Seconds per step of global batch `batch_size` with `counts[i]` replicas on node i."""
        key = canonical_placement(counts)
        cached = self._memo.get((key, batch_size))
        if cached is not None:
            return cached
        replicas = sum(counts)
        local = math.ceil(batch_size / replicas - 1e-8)
        curve = self.placements.get(key)
        if curve is not None:
            value = curve.time(local)
        else:
            value = self.anchor_time(sum(1 for c in counts if c > 0), replicas, local)
        self._memo[(key, batch_size)] = value
        return value

    def anchor_time(self, nodes: int, replicas: int, local_bsz: float) -> float:
        """Step time for an unmeasured placement: interpolated over node and replica counts (module doc)."""
        nodes = min(nodes, SCALABILITY_MAX_NODES)
        if nodes <= PROFILED_GPUS_PER_NODE:
            r = min(replicas, PROFILED_GPUS_PER_NODE * nodes)
            return self.placements[canonical_placement(_even_counts(nodes, r))].time(local_bsz)
        measured = sorted({n for n, _ in self.scalability} | {PROFILED_GPUS_PER_NODE})
        lo = max(n for n in measured if n <= nodes)
        hi = min(n for n in measured if n >= nodes)
        t_lo = self._at_nodes(lo, replicas, local_bsz)
        if hi == lo:
            return t_lo
        t_hi = self._at_nodes(hi, replicas, local_bsz)
        return t_lo + (t_hi - t_lo) * (nodes - lo) / (hi - lo)

    def _at_nodes(self, nodes: int, replicas: int, local_bsz: float) -> float:
        if nodes <= PROFILED_GPUS_PER_NODE:
            return self.anchor_time(nodes, replicas, local_bsz)
        counts = sorted(r for n, r in self.scalability if n == nodes)
        reps = [float(r) for r in counts]
        times = [self.scalability[(nodes, r)].time(local_bsz) for r in counts]
        return _interp(reps, times, float(replicas))


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        raise SpecError(str(path), "file not found", "check the path (profiles come from pollux/profiles)") from None


@lru_cache(maxsize=32)
def load_profile(app_dir: Path) -> Profile:
    """Read `placements.csv`, `scalability.csv` and every `validation-*.csv` of one application (cached)."""
    if not app_dir.is_dir():
        raise SpecError(
            str(app_dir),
            "no such application profile",
            "pass --profiles pointing at pollux/profiles, which has one folder per application",
        )
    placements = _curves(
        (r["placement"], float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
        for r in _read_rows(app_dir / "placements.csv")
    )
    scalability = _curves(
        (
            (int(r["num_nodes"]), int(r["num_replicas"])),
            float(r["local_bsz"]),
            float(r["step_time"]),
            float(r["sync_time"]),
        )
        for r in _read_rows(app_dir / "scalability.csv")
    )
    validation: dict[int, Validation] = {}
    for path in sorted(app_dir.glob("validation-*.csv")):
        bsz = int(path.stem.split("-", 1)[1])
        rows = _read_rows(path)
        validation[bsz] = Validation(
            bsz,
            tuple(float(r["iteration"]) for r in rows),
            tuple(float(r["metric"]) for r in rows),
            *(tuple(float(r.get(c) or "nan") for r in rows) for c in ("progress", "grad_sqr", "grad_var")),
        )
    return Profile(
        app_dir.name,
        {str(k): v for k, v in placements.items()},
        {k: v for k, v in scalability.items() if isinstance(k, tuple)},
        validation,
    )


_NUMBERS = re.compile(r"(\d+)")


def node_order(name: str) -> tuple[object, ...]:
    """Sort key for node names with numbers compared numerically (`n2` < `n10`)."""
    return tuple(int(p) if p.isdigit() else p for p in _NUMBERS.split(name))


def worker_counts(alloc: Allocation) -> list[int]:
    """Workers per node, nodes in `node_order` (empty when no worker runs)."""
    per_node: dict[str, int] = {}
    for (role, node), n in alloc.counts.items():
        if role is Role.WORKER:
            per_node[node] = per_node.get(node, 0) + n
    return [per_node[name] for name in sorted(per_node, key=node_order)]


@dataclass(frozen=True)
class PolluxTruth:
    """Ground truth of one Pollux job: `application` at global batch `batch_size`."""

    profile: Profile
    batch_size: int
    curve: LossCurve

    @property
    def total_steps(self) -> float:
        return self.profile.validation[self.batch_size].total_steps

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        counts = worker_counts(alloc)
        return 1.0 / self.profile.step_time(counts, self.batch_size) if counts else 0.0

    def loss(self, step: float) -> float | None:
        return self.curve(step)

    def runtime(self, replicas: int) -> float:
        """Seconds to finish on `replicas` GPUs packed onto profiled 4-GPU nodes (the oracle estimate)."""
        full, rest = divmod(replicas, PROFILED_GPUS_PER_NODE)
        counts = [PROFILED_GPUS_PER_NODE] * full + ([rest] if rest else [])
        return self.total_steps * self.profile.step_time(counts, self.batch_size)


FIDELITY_MODES = ("default", "pollux")  # how job length and speed are modelled (see `load_pollux`)


def load_pollux(workload_csv: Path, profiles_dir: Path, *, max_factor: float = 1.0, oracle: bool = False,
                fidelity: str = "default") -> Workload:
    """Jobs of a Pollux workload CSV, with ground truth from `profiles_dir/<application>/`.

    `max_factor == 1`: each job is fixed at `num_replicas` one-GPU workers.
    `max_factor > 1`: elastic from 1 to `ceil(max_factor * num_replicas)` workers;
    `max_factor = math.inf`: from 1 to as many as Pollux's simulator lets its own
    scheduler give the job (`peer_max_replicas`);
    the global batch size stays `batch_size` unless the fidelity is `pollux` (below).
    With `fidelity="pollux"` elastic jobs also opt into batch-size adaptation
    (`spec.adaptive_batch`, as every job under Pollux does): a policy that picks
    a batch runs them at it, the others at `batch_size`.
    `oracle`: `spec.estimate` is the true runtime at `num_replicas` (for the srtf
    reference line); otherwise no estimate is given. `spec.target.steps` is the
    job's length in steps (what the user's script trains for), `spec.job_type`
    the application. `fidelity="pollux"` models length and speed as Pollux's
    own simulator does (`workloads.pollux_peer`: progress and gain, gradient
    accumulation and local batch caps); the default reads the last validation
    row and the profiled step time (module doc).
    """
    rows = _read_rows(Path(workload_csv))
    if rows and not set(WORKLOAD_COLUMNS) <= set(rows[0]):
        raise SpecError(
            str(workload_csv), "is not a Pollux workload", f"expected the columns {','.join(WORKLOAD_COLUMNS)}"
        )
    path = Path(workload_csv)
    jobs = pollux_jobs(rows, str(workload_csv), profiles_dir, max_factor=max_factor, oracle=oracle, fidelity=fidelity)
    return Workload(name=f"pollux-{path.parent.name}-{path.stem}", jobs=jobs)


def pollux_jobs(rows: Sequence[Mapping[str, str]], source: str, profiles_dir: Path, *, max_factor: float = 1.0,
                oracle: bool = False, fidelity: str = "default") -> tuple[WorkloadJob, ...]:
    """The jobs of Pollux workload rows (`WORKLOAD_COLUMNS`), by submit time; `load_pollux` says what each option does.

    `source` names where the rows came from in errors (row i is line i + 2 of a CSV).
    """
    if fidelity not in FIDELITY_MODES:
        raise SpecError("fidelity", f"unknown mode {fidelity!r}", f"use one of {', '.join(FIDELITY_MODES)}")
    if max_factor < 1.0:
        raise SpecError("max_factor", f"{max_factor} is below 1", "use 1 for fixed-size jobs or more for elastic")
    jobs: list[WorkloadJob] = []
    for i, row in enumerate(rows):
        where = f"{source}:{i + 2}"
        app, replicas, bsz = row["application"], int(row["num_replicas"]), int(row["batch_size"])
        profile = load_profile(Path(profiles_dir) / app)
        runs = profile.validation.get(bsz)
        if runs is None:
            raise SpecError(
                where, f"{app} has no validation-{bsz}.csv", f"use one of the batch sizes {sorted(profile.validation)}"
            )
        truth: PolluxTruth | PeerTruth
        if fidelity == "pollux":
            truth = _peer_truth(where, profile, bsz)
        else:
            truth = PolluxTruth(profile, bsz, LossCurve.from_metric(runs.iterations, runs.metric))
        if max_factor == 1.0:
            hi = replicas
        elif math.isinf(max_factor):
            hi = max(replicas, peer_max_replicas(profile))
        else:
            hi = math.ceil(max_factor * replicas)
        spec = simple_job(
            row["name"],
            replicas,
            min_gpus=replicas if max_factor == 1.0 else 1,
            max_gpus=hi,
            job_type=app,
            target=Target(steps=round(truth.total_steps), epochs=runs.epochs),
            estimate=truth.runtime(replicas) if oracle else None,
            labels=(("batch_size", str(bsz)),),  # the user's global batch: lets same-type speed fits share a prior
            adaptive_batch=_adaptive(profile, bsz) if fidelity == "pollux" and max_factor > 1.0 else None,
        )
        jobs.append(WorkloadJob(row["name"], float(row["time"]), spec, truth))
    jobs.sort(key=lambda j: j.submit_time)
    return tuple(jobs)


PEER_MAX_REPLICAS = 64  # Pollux's simulator caps every job here ("simulator can't handle more"); its cluster's size


def peer_max_replicas(profile: Profile) -> int:
    """The most replicas Pollux's simulator lets its scheduler give a job of `profile`'s application.

    Peer (`simulator.py`, `get_pollux_job_info`): `min(2 * max_profiled_replicas, 64,
    max_batch_size // min_local_bsz)`, and 1 for ncf. The first term only paces
    exploration (a job may double the largest size it has run at, each round);
    the rest is the static cap this returns, so a scheduler here has the same
    freedom and paces its own growth.
    """
    if profile.app == "ncf":
        return 1
    smallest_local = min(c.local_bsz[0] for c in profile.placements.values())
    return max(1, min(PEER_MAX_REPLICAS, int(max(profile.validation) // smallest_local)))


def _adaptive(profile: Profile, batch_size: int) -> BatchRange:
    """Elastic jobs adapt their batch as Pollux's do: between the smallest and largest validated batch,
    the learning rate tuned at the submitted one (the policy that picks none runs them at it), each
    replica computing at most its application's local cap at once (`PeerModel.cap`, the peer's
    `local_bsz_bounds`: above it the truth accumulates micro-batches, and the job says so)."""
    from trainmaster.workloads.pollux_peer import peer_model  # the peer's model builds on this module's types

    cap = peer_model(profile).cap
    return BatchRange(min=min(profile.validation), max=max(profile.validation), base=batch_size,
                      local_max=math.floor(cap))


def _peer_truth(where: str, profile: Profile, batch_size: int) -> PeerTruth:
    from trainmaster.workloads.pollux_peer import PeerTruth  # the peer's model builds on this module's types

    if any(math.isnan(x) for v in profile.validation.values() for x in (*v.progress, *v.grad_sqr, *v.grad_var)):
        raise SpecError(where, f"{profile.app}'s validation files lack progress, grad_sqr or grad_var",
                        "use Pollux's profiles (validation-*.csv with those columns) or the default fidelity")
    return PeerTruth.of(profile, batch_size)
