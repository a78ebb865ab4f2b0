"""Job length and speed as Pollux's own simulator models them (`--fidelity pollux`).

Pollux (OSDI'21) evaluated Tiresias, Optimus and Pollux in a simulator built on
the same profiles we read (petuum/adaptdl, `simulator/`). Its published figures
(Tiresias 4,038 s on workloads 1-8) come from that model, so to compare with
them we replay jobs the way it does. Each choice below names the peer's code it
follows (`applications.py`, `simulator.py` of that folder):

- **Length is progress, not the last row's iterations.** A job is done when its
  *progress* reaches the progress of the end of epoch `max_epochs`
  (`Application.get_progress`: the smallest `progress` column value of that
  epoch over every `validation-*.csv`; `max_epochs` defaults to the fewest rows,
  `Application.__init__`). Progress is counted in steps of the smallest validated
  batch (`init_batch_size`); a step at batch `b` in epoch `e` earns the
  statistical-efficiency *gain* `(var + sqr) / (var / s + sqr)`, `s = b / init`,
  with `grad_sqr`, `grad_var` of that epoch interpolated linearly between the
  validated batch sizes around `b` (`Job.step`, `Application.get_grad_stats`).
  We turn this into a step count: `equivalent_steps(b)` is the sum over epochs of
  the epoch's progress divided by its gain, i.e. the optimizer steps at batch `b`
  the peer needs. Large batches learn less per sample, so cifar10 at 2048 needs
  5% more steps than its last row says, yolov3 at 64 9% more.
- **Batch per replica** (`Job.update_local_bsz`, fixed target batch `B`): local
  batch `ceil(B / r)`; above the largest profiled local batch (or the
  application's cap: yolov3 8, `APPLICATIONS`) gradients accumulate over
  `ceil(local / cap)` micro-batches; a 1-GPU job whose batch exceeds
  `init_batch_size` accumulates over at least 2 (ncf at 32768: two micro-batches
  of 16384); a micro-batch never exceeds `max_batch / (r * micro-batches)`. The
  batch actually trained, `r * micro * count`, can differ from `B` (bert 384 on
  6 GPUs trains 360); its gain is what counts.
- **Step time** (`Job.step`): `step + (count - 1) * (step - sync)` at the
  micro-batch, from `placements.csv` for a measured placement (interpolated in
  local batch), otherwise interpolated linearly over (nodes, replicas, local
  batch) among every measured point of `placements.csv` (averaged per node and
  replica count) and `scalability.csv` (`Application.get_throughput`, scipy's
  `LinearNDInterpolator`, nodes capped at 16). Outside those points' hull, where
  the peer would fail, we fall back to `Profile.anchor_time`.

Differences kept on purpose: the peer rounds each epoch's duration to whole
seconds (at most half a second per epoch); and the engine runs one speed per
allocation, so the gain of a trained batch that differs from `B` is applied as
its ratio over the whole job (`equivalent_steps(B) / equivalent_steps(b)`),
exact for a job that keeps one replica count, as every fixed-size job does.
A job trained at a batch the scheduler chose (`PeerTruth.at_batch`, batch-size
adaptation) is exact per epoch instead: the engine re-reads its rate at each
epoch's end.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec
from trainmaster.workloads.base import BatchRun
from trainmaster.workloads.pollux import (
    SCALABILITY_MAX_NODES,
    LossCurve,
    Profile,
    _interp,
    canonical_placement,
    worker_counts,
)

# Applications' local batch caps below their largest profiled one (peer: `APPLICATIONS` in applications.py).
LOCAL_BATCH_CAP: dict[str, float] = {"yolov3": 8.0}


@dataclass(frozen=True)
class Batching:
    """How `r` replicas train a target batch: micro-batch per replica and micro-batches per step."""

    micro: int  # samples per replica per micro-batch (the peer's `atomic_bsz`)
    count: int  # micro-batches per optimizer step (the peer's `accum_steps + 1`)
    replicas: int

    @property
    def batch(self) -> int:
        """The global batch actually trained per optimizer step."""
        return self.replicas * self.micro * self.count


@dataclass
class PeerModel:
    """One application's progress, gain and step-time model as the peer simulator computes them (module doc)."""

    profile: Profile
    epochs: int = field(init=False)
    init_batch: int = field(init=False)
    max_batch: int = field(init=False)
    cap: float = field(init=False)
    boundaries: tuple[float, ...] = field(init=False)  # progress at the end of each epoch, 0 first
    _nd: Any = field(default=None, init=False, repr=False)
    _equivalent: dict[float, tuple[float, ...]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        runs = self.profile.validation
        self.epochs = min(v.epochs for v in runs.values())
        self.init_batch, self.max_batch = min(runs), max(runs)
        largest = max(c.local_bsz[-1] for c in self.profile.placements.values())
        self.cap = min(largest, LOCAL_BATCH_CAP.get(self.profile.app, largest))
        ends = [min(v.progress[e] for v in runs.values()) for e in range(self.epochs)]
        self.boundaries = (0.0, *ends)

    def batching(self, replicas: int, batch_size: int) -> Batching:
        """The peer's `Job.update_local_bsz` for a fixed target batch."""
        local = math.ceil(batch_size / replicas - 1e-8)
        count = math.ceil(local / self.cap - 1e-8)
        if replicas == 1 and batch_size > self.init_batch:
            count = max(2, count)
        micro = math.ceil(local / count - 1e-8)
        micro = min(micro, int(self.max_batch / (replicas * count)))
        return Batching(micro=max(1, micro), count=count, replicas=replicas)

    def grad_stats(self, batch: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) of `epoch` at `batch`, interpolated between validated batches; var at `init_batch`."""
        sizes = sorted(self.profile.validation)
        sqr = _interp([float(b) for b in sizes], [self.profile.validation[b].grad_sqr[epoch] for b in sizes], batch)
        var = _interp([float(b) for b in sizes], [self.profile.validation[b].grad_var[epoch] for b in sizes], batch)
        return sqr, var

    def gain(self, batch: float, epoch: int) -> float:
        """Progress one step at `batch` earns in `epoch` (statistical efficiency; 1 at `init_batch`)."""
        sqr, var = self.grad_stats(batch, epoch)
        scale = batch / self.init_batch
        return (var + sqr) / (var / scale + sqr)

    def cumulative_steps(self, batch: float) -> tuple[float, ...]:
        """Optimizer steps at `batch` to finish each epoch: 0 first, the job's length last."""
        cached = self._equivalent.get(batch)
        if cached is None:
            out = [0.0]
            for e in range(self.epochs):
                out.append(out[-1] + (self.boundaries[e + 1] - self.boundaries[e]) / self.gain(batch, e))
            cached = self._equivalent[batch] = tuple(out)
        return cached

    def step_time(self, counts: Sequence[int], batching: Batching) -> float:
        """Seconds per optimizer step of `batching` on `counts[i]` replicas per node (the peer's `Job.step`)."""
        step, sync = self._throughput(counts, batching.micro)
        return step + (batching.count - 1) * (step - sync)

    def _throughput(self, counts: Sequence[int], micro: float) -> tuple[float, float]:
        curve = self.profile.placements.get(canonical_placement(counts))
        if curve is not None:
            return (_interp(curve.local_bsz, curve.step_time, micro), _interp(curve.local_bsz, curve.sync_time, micro))
        nodes = min(sum(1 for c in counts if c > 0), SCALABILITY_MAX_NODES)
        step, sync = self._interpolator()([[float(nodes), float(sum(counts)), float(micro)]])[0]
        if step == step and sync == sync:  # not NaN: inside the measured points' hull
            return float(step), float(sync)
        t = self.profile.anchor_time(nodes, sum(counts), micro)
        return t, 0.0

    def _interpolator(self) -> Any:
        if self._nd is None:
            from scipy.interpolate import LinearNDInterpolator  # imported here: costs ~0.3 s at CLI start-up

            points: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
            for key, curve in self.profile.placements.items():
                nodes, reps = len(key), sum(int(d) for d in key)
                for x, s, y in zip(curve.local_bsz, curve.step_time, curve.sync_time, strict=True):
                    points.setdefault((nodes, reps, x), []).append((s, y))
            xs = [[float(n), float(r), x] for (n, r, x) in points]
            ys = [[sum(s for s, _ in v) / len(v), sum(y for _, y in v) / len(v)] for v in points.values()]
            for (n, r), curve in self.profile.scalability.items():
                for x, s, y in zip(curve.local_bsz, curve.step_time, curve.sync_time, strict=True):
                    xs.append([float(n), float(r), x])
                    ys.append([s, y])
            self._nd = LinearNDInterpolator(xs, ys)
        return self._nd


_MODELS: dict[int, PeerModel] = {}


def peer_model(profile: Profile) -> PeerModel:
    """The (cached) peer model of one loaded profile."""
    model = _MODELS.get(id(profile))
    if model is None or model.profile is not profile:
        model = _MODELS[id(profile)] = PeerModel(profile)
    return model


@dataclass(frozen=True)
class PeerTruth:
    """Ground truth of one Pollux job as the peer simulator models it (module doc).

    Steps are optimizer steps at the target batch `batch_size`; an allocation
    whose trained batch differs advances at the ratio of the two lengths.
    """

    model: PeerModel
    batch_size: int
    curve: LossCurve
    _speed: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, profile: Profile, batch_size: int) -> PeerTruth:
        model = peer_model(profile)
        ends = model.cumulative_steps(float(batch_size))
        metric = profile.validation[batch_size].metric[: model.epochs]
        return cls(model, batch_size, LossCurve.from_metric(ends[1:], metric))

    @property
    def total_steps(self) -> float:
        return self.model.cumulative_steps(float(self.batch_size))[-1]

    def speed(self, counts: Sequence[int]) -> float:
        """Optimizer steps (at the target batch) per second on `counts[i]` replicas per node."""
        key = canonical_placement(counts)
        cached = self._speed.get(key)
        if cached is None:
            batching = self.model.batching(sum(counts), self.batch_size)
            ratio = self.total_steps / self.model.cumulative_steps(float(batching.batch))[-1]
            cached = self._speed[key] = ratio / self.model.step_time(counts, batching)
        return cached

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        counts = worker_counts(alloc)
        return self.speed(counts) if counts else 0.0

    def at_batch(self, alloc: Allocation, batch: int, done: float) -> BatchRun:
        """Training at global batch `batch` (the scheduler's choice), `done` target-batch steps in.

        Progress stays counted in steps at the submitted batch `batch_size` (the
        job's learning-rate base): a step at the trained batch `b` in epoch `e`
        earns `gain(b, e) / gain(batch_size, e)` of them, exact per epoch (the
        rate holds until the epoch's end, `until`). The job reports what the
        train library measures: optimizer steps/s at `b` and the epoch's gradient
        statistics, the variance rescaled to the base batch (`phi` unchanged).
        """
        return self.at_counts(worker_counts(alloc), batch, done)

    def at_counts(self, counts: Sequence[int], batch: int, done: float) -> BatchRun:
        """`at_batch` on `counts[i]` replicas per node (what a goodput oracle asks of a candidate size)."""
        ends = self.model.cumulative_steps(float(self.batch_size))
        epoch = min(max(bisect.bisect_right(ends, done + 1e-9 * max(ends[-1], 1.0)) - 1, 0), self.model.epochs - 1)
        batching = self.model.batching(max(sum(counts), 1), batch)
        sqr, var = self.model.grad_stats(float(batching.batch), epoch)
        var_base = var * self.model.init_batch / self.batch_size
        if not counts:
            return BatchRun(0.0, math.inf, batching.batch, 0.0, sqr, var_base)
        steps = 1.0 / self.model.step_time(counts, batching)
        ratio = self.model.gain(float(batching.batch), epoch) / self.model.gain(float(self.batch_size), epoch)
        until = ends[epoch + 1] if epoch + 1 < self.model.epochs else math.inf
        return BatchRun(steps * ratio, until, batching.batch, steps, sqr, var_base)

    def loss(self, step: float) -> float | None:
        return self.curve(step)

    def runtime(self, replicas: int) -> float:
        """Seconds to finish on `replicas` GPUs packed onto 4-GPU nodes (the oracle estimate)."""
        full, rest = divmod(replicas, 4)
        return self.total_steps / self.speed([4] * full + ([rest] if rest else []))
