"""Speed models: steps/s as a function of workers, parameter servers and nodes, fitted by NNLS.

Forms (Optimus, EuroSys'18, section 3.2; DESIGN.md "Models"):

- parameter server, synchronous: `f(p, w) = 1 / (t0*M/w + t1 + t2*w/p + t3*w + t4*p)`
- parameter server, asynchronous: `f(p, w) = w / (t0 + t1*w/p + t2*w + t3*p)`
- all-reduce: step time `T = a + b*m + sync(K, nodes)` with local batch `m = M/K`; sync is 0 for one
  replica, `c1 + d1*(K-2)` inside one node and `c2 + d2*(K-2)` across nodes (Pollux's two regimes).

Each form is linear in its coefficients once the speed is turned into a time-like quantity
`y = g/f` (g = w for asynchronous jobs, else 1), so non-negative least squares fits it. Rows are
divided by `y`: the fit minimizes relative error, which is what remaining-time predictions need.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from trainmaster.core.job import Architecture, JobSpec


class Form(enum.Enum):
    PS_SYNC = "ps-sync"
    PS_ASYNC = "ps-async"
    ALLREDUCE = "allreduce"


N_PARAMS = {Form.PS_SYNC: 5, Form.PS_ASYNC: 4, Form.ALLREDUCE: 6}


class Config(NamedTuple):
    """A resource configuration: workers (replicas), parameter servers, nodes used, global batch M.

    A named tuple: policies build thousands per decision, and a tuple is the cheapest hashable record.
    """

    workers: int
    ps: int = 0
    nodes: int = 1
    batch: float = 1.0


def label(spec: JobSpec, key: str) -> str | None:
    return dict(spec.labels).get(key)


def form_of(spec: JobSpec) -> Form:
    """All-reduce, or PS synchronous unless the job is labelled `sync: async`."""
    if spec.architecture is Architecture.PARAMETER_SERVER:
        return Form.PS_ASYNC if label(spec, "sync") == "async" else Form.PS_SYNC
    return Form.ALLREDUCE


def global_batch(spec: JobSpec) -> float:
    """The job's global batch size from its `batch_size` label (1 when it does not say)."""
    raw = label(spec, "batch_size") or dict(spec.env).get("TM_BATCH_SIZE")
    try:
        value = float(raw) if raw is not None else 1.0
    except ValueError:
        value = 1.0
    return value if value > 0 else 1.0


def features(form: Form, c: Config) -> tuple[float, ...]:
    """The row of the linear system for one configuration."""
    w = max(c.workers, 1)
    if form is Form.PS_SYNC:
        p = max(c.ps, 1)
        return (c.batch / w, 1.0, w / p, float(w), float(p))
    if form is Form.PS_ASYNC:
        p = max(c.ps, 1)
        return (1.0, w / p, float(w), float(p))
    multi = c.nodes > 1
    single = w > 1 and not multi
    extra = float(max(w - 2, 0))
    return (1.0, c.batch / w, float(single), float(single) * extra, float(multi), float(multi) * extra)


def micro_batches(c: Config, local_max: int | None) -> int:
    """Micro-batches per optimizer step of `c` for a job whose replica computes at most `local_max` samples at once.

    `ceil(local / local_max)` with the local batch `ceil(batch / workers)` (as `train.goodput.micro_batches`
    runs it; 1 without a cap). Each micro-batch pays the step's fixed cost (`a`), so a line in the local
    batch alone cannot pass through rows at large and small local batches (cifar10's rows at local 1,024-4,096
    put its one-node sizes 40% slow, bench/results/trainmaster.md thirteenth look).
    """
    if local_max is None:
        return 1
    local = math.ceil(c.batch / max(c.workers, 1) - 1e-8)
    return max(1, math.ceil(local / local_max - 1e-8))


def goodput_features(c: Config, local_max: int | None) -> tuple[float, ...]:
    """The goodput law's row (8 columns): the all-reduce `features` with the fixed term counted once per
    micro-batch (`micro_batches`), then two terms in the local batch `m` that the sync terms lack.

    - `single * m` (column 6, one node): co-located replicas slow each other more at large local batches
      (the Pollux profiles' step time over 1 GPU's, per local sample: cifar10 +136 us on 2 GPUs, +83 on 4;
      imagenet +87 / +361). A type's one-node rows are at the submitted batch (large local batches) while
      sizing asks small ones: with a constant one-node sync `c1`, that growth lands in `c1` and the law puts
      small one-node sizes ~20% slow (bench/results/trainmaster.md, fifteenth look).
    - `multi * micro / m` (column 7, across nodes): the cross-node sync a step waits on shrinks as the
      backward pass it overlaps grows (per local sample, over 1 GPU: imagenet -1,028 us on 2x2, -1,715 on
      4x4; bert, deepspeech2, yolov3 the same sign; cifar10 flat). The sync overlaps the last micro-batch's
      backward, so the micro-batch's local batch `m / micro`. Without it, a law that learned the one-node
      growth (column 6) reads multi-node sizes at small local batches too fast, and at load 2 that cost
      more than column 6 gained (sixteenth and seventeenth looks).

    Each is fitted only where the rows tell it from the sync terms beside it (`separable`).
    """
    return goodput_row(c, micro_batches(c, local_max))


def goodput_row(c: Config, micro: int) -> tuple[float, ...]:
    """`goodput_features` of `c` run as `micro` micro-batches per step (a caller that knows the count itself:
    bench/speed_predict.py reads it from the peer's batching)."""
    row = features(Form.ALLREDUCE, c)
    return (float(micro), *row[1:], row[2] * row[1], row[4] * micro / max(row[1], 1e-9))


ONE_NODE_TERM, CROSS_NODE_TERM = 6, 7  # `goodput_features` columns fitted only where `separable`


def separable(table: np.ndarray, term: int) -> bool:
    """Whether the rows of a goodput `table` that `term` (`ONE_NODE_TERM` or `CROSS_NODE_TERM`) applies to tell it
    from the sync terms of their regime (`c1`, `d1` on one node; `c2`, `d2` across nodes).

    The columns (sync level, sync slope, term) must have a higher rank than the sync columns alone. One local
    batch, or one global batch at two replica counts (local M/2 and M/4 on one node; M/8 and M/16 across
    nodes: the term is then a line in the replicas), cannot: NNLS would split the sync between the terms at
    random and carry the split to every other local batch. The cross-node slope `d2` counts here even where
    the fit holds it at 0 (`CROSS_SLOPE_SIZES`): else the term would be that slope under another name.
    """
    level = 2 if term == ONE_NODE_TERM else 4
    part = table[table[:, level] > 0][:, [level, level + 1, term]]
    if not len(part):
        return False
    part = part / np.maximum(np.linalg.norm(part, axis=0), 1e-300)
    return bool(np.linalg.matrix_rank(part, tol=1e-6) > np.linalg.matrix_rank(part[:, :2], tol=1e-6))


def time_like(form: Form, c: Config, steps_per_s: float) -> float:
    """`y = g/f`: seconds per step, times the workers for asynchronous jobs."""
    return (max(c.workers, 1) if form is Form.PS_ASYNC else 1.0) / steps_per_s


class SpeedPredictor(Protocol):
    """Anything that predicts steps/s for a configuration."""

    def steps_per_s(self, c: Config) -> float: ...


@dataclass(frozen=True)
class SpeedFit(SpeedPredictor):
    """Fitted coefficients of one form; `configs` is how many distinct configurations it saw.

    One made by `deferred_fit` solves for `theta` on its first read, from the rows captured when it was made.
    """

    form: Form
    theta: tuple[float, ...]
    configs: int = 0

    def __getattr__(self, name: str) -> tuple[float, ...]:
        """(Called only for an attribute not set: a deferred fit's `theta`, solved once and kept.)"""
        inputs = self.__dict__.get("_inputs") if name == "theta" else None
        if inputs is None:
            raise AttributeError(name)
        form, rows, weights, cross_slope, table = inputs
        made = fit(form, rows, weights, cross_slope=cross_slope, table=table)
        assert made is not None  # (rows: never empty here)
        object.__setattr__(self, "theta", made.theta)
        del self.__dict__["_inputs"]
        return made.theta

    def steps_per_s(self, c: Config) -> float:
        y = 0.0
        for t, x in zip(self.theta, features(self.form, c), strict=True):
            y += t * x
        if y <= 0:
            return 0.0
        return (max(c.workers, 1) if self.form is Form.PS_ASYNC else 1.0) / y


@dataclass(frozen=True)
class MicroFit(SpeedFit):
    """The all-reduce goodput law (`goodput_features`), predicting for a job whose cap is `local_max` (None: it
    declares none, one micro-batch)."""

    local_max: int | None = None

    def steps_per_s(self, c: Config) -> float:
        y = 0.0
        for t, x in zip(self.theta, goodput_features(c, self.local_max), strict=True):
            y += t * x
        return 1.0 / y if y > 0 else 0.0


def for_local_max(law: SpeedFit | None, local_max: int | None) -> SpeedFit | None:
    """`law` as it predicts for a job with `local_max` (a goodput law, `MicroFit`, takes the job's cap)."""
    if not isinstance(law, MicroFit) or local_max is None:
        return law
    return MicroFit(law.form, law.theta, law.configs, local_max)


@dataclass(frozen=True)
class LinearScaling(SpeedPredictor):
    """Optimistic prior: speed linear in workers from a measured point, flat beyond `cap` workers.

    For parameter-server jobs the servers must keep up: with fewer servers
    per worker than at the measured point, speed scales with the servers instead.
    """

    ref: Config
    ref_speed: float
    cap: int

    def steps_per_s(self, c: Config) -> float:
        w = float(min(c.workers, self.cap))
        if self.ref.ps > 0 and c.ps > 0:
            w = min(w, c.ps * self.ref.workers / self.ref.ps)
        return self.ref_speed * max(w, 0) / max(self.ref.workers, 1)


@dataclass(frozen=True)
class Scaled(SpeedPredictor):
    """Another predictor times a calibration factor (a type prior fitted to this job's own points)."""

    base: SpeedPredictor
    factor: float

    def steps_per_s(self, c: Config) -> float:
        return self.base.steps_per_s(c) * self.factor


@dataclass(frozen=True, slots=True)
class Row:
    """One observed configuration: mean of `y = g/f` over `count` reports."""

    config: Config
    y: float
    count: int = 1


# Cross-node sync slope: fitted only once the rows hold this many multi-node sizes (`fit(cross_slope=False)`).
CROSS_SLOPE_SIZES = 3


def cross_sizes(rows: Iterable[Row]) -> int:
    """Distinct worker counts among the multi-node rows: how many points the cross-node sync law rests on."""
    return len({r.config.workers for r in rows if r.config.nodes > 1})


def packing_weights(rows: Sequence[Row]) -> list[float]:
    """Each row's weight in the goodput law's fit: a fragmented multi-node row's packing share, else 1.

    A multi-node row is fragmented when it spans more nodes than its workers need at the density
    of the densest one-node row, `nodes > ceil(workers / k)` (the rows carry no node size; a job or
    its type that ran k replicas on one node shows a node holds k); it counts `ceil(workers / k) /
    nodes`, the share of its nodes a packed placement would use. Why a weight, not a drop: a
    fragmented split's cross-node sync (2 workers over 2 nodes) says little about a packed size's,
    and at weight 1 one such row set every multi-node size's sync and kept imagenet-71 at 4 GPUs for
    54,000 s (Pollux workload 6, bench/results/trainmaster.md eighth look); but on a full cluster
    split placements are what the placer hands out, and dropping them cost at loads >= 1.5 (ninth
    look). Packed partial nodes (5 workers as 4 + 1) count fully: the placer packs, sizing meets them.
    """
    k = max((r.config.workers for r in rows if r.config.nodes <= 1), default=1)
    return [min(1.0, -(-r.config.workers // k) / r.config.nodes) if r.config.nodes > 1 else 1.0 for r in rows]


def fit(form: Form, rows: Sequence[Row], weights: Sequence[float] | None = None, *,
        cross_slope: bool = True, table: Sequence[tuple[float, ...]] | None = None) -> SpeedFit | None:
    """NNLS on relative error; None without rows.

    `table`: each row's `features` (`goodput_features` for the goodput law), when the caller keeps them
    (`priors.TypePriors`: a type's prior refits after every update of one job's rows, the others' unchanged).

    `cross_slope=False` (all-reduce only; the goodput law, `ModelBook.speed(optimistic=True)`): the
    cross-node sync per extra replica `d2` is held at 0, so `c2` is the mean cross-node sync, until
    the rows measure `CROSS_SLOPE_SIZES` multi-node sizes. Why: the truth's cross-node sync is not a
    line in the replicas (placements interpolate: 1.33 s on 2 nodes x 4, 0.82 s on 4 x 4, Pollux
    peer), so a slope through two sizes (0.17-0.26 s per replica) predicts ~2.9 s at 16 and under-rates
    every larger multi-node size; a third size is the least that tests a line. Pollux's own fit is
    optimistic the same way: it fixes the retrogression terms without the data to fit them and
    penalises them otherwise (petuum/adaptdl `adaptdl/goodput.py`, `fit_perf_params`, `_obj_fn`).
    The goodput law also down-weights fragmented multi-node rows (`packing_weights`), and has two terms in
    the local batch, one per sync regime, each held at 0 until its rows can tell it from that regime's sync
    (`goodput_features`: its rows; without `table`, those of a job without a cap); it returns a `MicroFit`.
    """
    if not rows:
        return None
    goodput = form is Form.ALLREDUCE and not cross_slope
    if goodput:
        share = packing_weights(rows)
        weights = [s * (1.0 if weights is None else weights[i]) for i, s in enumerate(share)]
        if table is None:
            table = [goodput_features(r.config, None) for r in rows]
    a = np.array([features(form, r.config) for r in rows] if table is None else table, dtype=float)
    held = [t for t in (ONE_NODE_TERM, CROSS_NODE_TERM) if not separable(a, t)] if goodput else []
    if goodput and cross_sizes(rows) < CROSS_SLOPE_SIZES:
        held.append(5)
    a[:, held] = 0.0  # zero columns: NNLS leaves their coefficients at 0
    y = np.array([r.y for r in rows], dtype=float)
    w = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=float)
    scale = np.sqrt(w) / y
    a_s = a * scale[:, None]
    norms = np.linalg.norm(a_s, axis=0)
    norms[norms == 0] = 1.0
    from scipy.optimize import nnls  # imported here: scipy.optimize costs ~0.6 s at CLI start-up

    theta, _ = nnls(a_s / norms, y * scale, maxiter=50 * a.shape[1])
    theta = theta / norms
    theta[held] = 0.0
    if goodput:
        return MicroFit(form=form, theta=tuple(float(t) for t in theta), configs=_configs(rows))
    return SpeedFit(form=form, theta=tuple(float(t) for t in theta), configs=_configs(rows))


def _configs(rows: Sequence[Row]) -> int:
    return len({r.config for r in rows})


def deferred_fit(form: Form, rows: Sequence[Row], weights: Sequence[float] | None = None, *,
                 cross_slope: bool = True, table: Sequence[tuple[float, ...]] | None = None) -> SpeedFit | None:
    """`fit`, solved when its `theta` is first read (a type's prior is refit after every update of its rows and
    captured by each report's model, most of them replaced unread; a job's own fit is refit as its rows change
    shape or a count doubles, and on Philly nobody reads a running job's speed). `rows`, `weights` and `table`
    must not change afterwards (the caller's own lists); the same `theta`, bit for bit, as `fit` now."""
    if not rows:
        return None
    out = object.__new__(MicroFit if form is Form.ALLREDUCE and not cross_slope else SpeedFit)  # (as `fit`)
    out.__dict__.update(form=form, configs=_configs(rows), _inputs=(form, rows, weights, cross_slope, table))
    return out


def mape(model: SpeedPredictor, truth: Iterable[tuple[Config, float]]) -> float:
    """Mean absolute percentage error of predicted steps/s against true steps/s."""
    errs = [abs(model.steps_per_s(c) - f) / f for c, f in truth if f > 0]
    return 100.0 * sum(errs) / len(errs) if errs else math.nan


# -- speed per GPU type ------------------------------------------------------------
# Relative speed of one GPU of each type when nothing is learned yet: the median over Gavel's 26 job
# types at scale 1 of steps/s on that type over steps/s on a K80 (Gavel OSDI'20,
# simulation_throughputs.json; medians 3.32 and 4.05, spread 1.5-8.7 and 0.66-11.6). A prior only:
# a job's own reports, and its type's, replace it (`relative_speeds`).
GENERIC_TYPE_SPEED: dict[str, float] = {"k80": 1.0, "p100": 3.3, "v100": 4.1}
_SOLVE_ROUNDS = 20


_NO_RATE = (0.0, 0)  # a type not seen on a configuration yet: (mean steps/s, reports)


class TypeRates:
    """Mean steps/s per (configuration, GPU type): what reports on each GPU type showed.

    A report counts only when its allocation's GPUs are all of one type (a mixed
    allocation runs at its slowest type and says little about either).
    """

    def __init__(self) -> None:
        self.rows: dict[Config, dict[str, tuple[float, int]]] = {}  # config -> type -> (mean steps/s, reports)
        self.version = 0
        self._types: frozenset[str] = frozenset()  # every type in `rows` (read per model: kept, not rebuilt)

    def add(self, c: Config, gpu_type: str, steps_per_s: float) -> None:
        per_type = self.rows.get(c)
        if per_type is None:  # (not `setdefault`: a dict built per report only to be dropped)
            per_type = self.rows[c] = {}
        mean, n = per_type.get(gpu_type, _NO_RATE)
        per_type[gpu_type] = (mean + (steps_per_s - mean) / (n + 1), n + 1)
        self.version += 1
        if gpu_type not in self._types:
            self._types = self._types | {gpu_type}

    def repeat(self, c: Config, gpu_type: str, times: int) -> None:
        """`add` of the mean steps/s on (c, gpu_type) `times` times: only the count moves (`m + 0.0 / n` is `m`)."""
        per_type = self.rows[c]
        mean, n = per_type[gpu_type]
        per_type[gpu_type] = (mean, n + times)
        self.version += times

    @property
    def types(self) -> frozenset[str]:
        """The GPU types seen (`add` and `repeat` are the only writers of `rows`)."""
        return self._types


def relative_speeds(rates: TypeRates | None, prior: Mapping[str, float] = GENERIC_TYPE_SPEED) -> dict[str, float]:
    """Speed of each GPU type relative to the others for one job (only ratios mean anything).

    Fits `log speed(c, t) = b_c + a_t` to the observed means by alternating
    least squares, starting from the prior's `a_t`: a type seen on a
    configuration also seen on another type is placed relative to it by what
    was measured; a type never seen keeps its prior ratio to the geometric
    centre of the seen ones (which of two measured types is "off" the prior
    cannot be told apart: both move).
    """
    a = {t: math.log(v) for t, v in prior.items() if v > 0}
    cells = [] if rates is None else [(c, t, math.log(v)) for c, per in rates.rows.items()
                                      for t, (v, _) in per.items() if v > 0]
    if not cells:
        return {t: math.exp(x) for t, x in a.items()}
    fallback = sum(a.values()) / len(a) if a else 0.0
    for _, t, _ in cells:
        a.setdefault(t, fallback)
    configs = {c for c, _, _ in cells}
    for _ in range(_SOLVE_ROUNDS if len(rates.types if rates else ()) > 1 else 1):
        b = {c: 0.0 for c in configs}
        nb = dict.fromkeys(configs, 0)
        for c, t, y in cells:
            b[c] += y - a[t]
            nb[c] += 1
        for c in configs:
            b[c] /= nb[c]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for c, t, y in cells:
            sums[t] = sums.get(t, 0.0) + y - b[c]
            counts[t] = counts.get(t, 0) + 1
        for t, total in sums.items():
            a[t] = total / counts[t]
    seen = [t for t in {t for _, t, _ in cells} if t in prior and prior[t] > 0]
    if seen:  # the seen types keep the prior's geometric centre: an unseen type stays where the prior puts it
        shift = sum(math.log(prior[t]) - a[t] for t in seen) / len(seen)
        for t in {t for _, t, _ in cells}:
            a[t] += shift
    return {t: math.exp(x) for t, x in a.items()}
