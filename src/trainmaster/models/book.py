"""The model book: what each job's reports taught, and the fitted models policies read.

`ModelBook.observe` takes a job's `Report`s (step, loss, steps/s and the
allocation it ran on); `ModelBook.model` returns an immutable `JobModel`: a
speed predictor and the steps still to go. Speed comes from, in order: the
job's own fit (enough distinct configurations; siblings' points added with a
small weight), its type's pooled fit scaled to the job's own points, or
optimistic linear scaling from its own points capped at 2x the largest
allocation seen. It never reads a simulator's ground truth.

Speed per GPU type: reports whose GPUs are all of one type also feed the job's
and its job type's `TypeRates`; `JobModel.type_speed` holds the relative speed
of each GPU type once two types were seen (else empty: placement uses the
generic prior, `speed.GENERIC_TYPE_SPEED`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from trainmaster.core.allocation import Allocation
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role, Target
from trainmaster.models.convergence import LossCurve, Progress, fit_loss_curve, remaining_steps
from trainmaster.models.goodput import GoodputSpeed, NoiseScale
from trainmaster.models.priors import TypePriors
from trainmaster.models.speed import (
    N_PARAMS,
    Config,
    Form,
    LinearScaling,
    Row,
    Scaled,
    SpeedPredictor,
    TypeRates,
    deferred_fit,
    fit,
    for_local_max,
    form_of,
    global_batch,
    goodput_features,
    label,
    relative_speeds,
    time_like,
)

MAX_LOSS_POINTS = 400  # older points are thinned beyond this
GOODPUT_BASES = ("own fit", "type prior")  # speed laws fitted with the batch as a feature: goodput may use them
_O = TypeVar("_O")
_T = TypeVar("_T")
_NO_TYPE_SPEED: Mapping[str, float] = MappingProxyType({})  # (read-only: one shared copy)


def config_of(alloc: Allocation, batch: float) -> Config:
    return Config(*_shape_of(alloc), batch=batch)


def _shape_of(alloc: Allocation) -> tuple[int, int, int]:
    """Workers, parameter servers and nodes (the workers' without servers, else all) of an allocation."""
    workers = alloc.count(Role.WORKER)
    ps = alloc.count(Role.PS)
    if alloc.on_one_node:  # (1 below either way)
        return workers, ps, 1
    nodes = len({t.node for t in alloc.tasks if t.role is Role.WORKER}) if ps == 0 else len(alloc.nodes)
    return workers, ps, max(nodes, 1)


@dataclass(frozen=True)
class JobModel:
    """A job's fitted models at one moment; immutable, safe inside a Snapshot."""

    job_id: str
    form: Form
    batch: float
    speed: SpeedPredictor | None
    basis: str  # "own fit", "type prior", "linear scaling" or "none": where the speed came from
    step: float
    remaining: float | None  # steps to the target; None when not known yet
    configs: int  # distinct configurations this job has run on
    curve: LossCurve | None = None
    # relative speed per GPU type (learned from reports on 2+ types; empty: no evidence, use a prior)
    type_speed: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    goodput: GoodputSpeed | None = None  # adaptive-batch jobs with a noise scale and a fitted speed law (batch choice)
    max_workers: int = 0  # the most workers it has reported from (how far its speed law was measured)

    def best_batch(self, workers: int, ps: int = 0, nodes: int = 1) -> int | None:
        """The global batch with the most goodput on this configuration; None unless the job adapts it."""
        if self.goodput is None:
            return None
        return self.goodput.best(self.config(workers, ps, nodes))[0]

    def config(self, workers: int, ps: int = 0, nodes: int = 1) -> Config:
        return Config(workers=workers, ps=ps, nodes=nodes, batch=self.batch)

    def steps_per_s(self, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
        if self.speed is None:
            return None
        return self.speed.steps_per_s(self.config(workers, ps, nodes))

    # (a class switch, not a field) `remaining_time` asks the steps left before the speed: unknown steps
    # answer None at once, without fitting a `LazyJobModel`'s speed nobody else reads (Philly's targets are
    # unknown: every running job's, at every reservation). False: the speed first (the reference).
    remaining_first = True

    def remaining_time(self, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
        """Predicted seconds to the target on this configuration (inf when it makes no progress)."""
        if self.remaining_first and self.remaining is None:
            return None
        f = self.steps_per_s(workers, ps, nodes)
        if f is None or self.remaining is None:
            return None
        return math.inf if f <= 0 else self.remaining / f


def set_fields(model: JobModel, fields: Mapping[str, object]) -> JobModel:
    """Set every field of a fresh `JobModel` (or subclass) in one `__dict__` update; returns it.

    The one place that relies on `JobModel` being a frozen dataclass without slots (its fields live in the
    instance `__dict__`): a per-report or per-waiting-job model is built without the frozen init's
    `object.__setattr__` per field. `fields` must name every field (the init checks nothing here).
    """
    model.__dict__.update(fields)
    return model


class JobLearner:
    """One job's observations: per-configuration mean speed, the loss points, progress."""

    # (a class switch) A report that repeats the job's last speed on the same allocation, without a loss, epoch,
    # batch or gradient statistics (Philly's every report within a run), moves only its row's count: the row's
    # mean stays (`y - mean` is 0.0), so it is counted without the general path. False: every report takes it.
    count_repeats = True

    def __init__(self, job_id: str, spec: JobSpec) -> None:
        self.job_id = job_id
        self.spec = spec
        self.form = form_of(spec)
        adaptive = spec.adaptive_batch
        self.batch = float(adaptive.base) if adaptive else global_batch(spec)
        self.batch_known = adaptive is not None or label(spec, "batch_size") is not None
        self.noise = NoiseScale(adaptive.base) if adaptive else None
        self.local_max = adaptive.local_max if adaptive else None  # its replicas' memory bound (micro-batches)
        self._rows: dict[Config, Row] = {}  # (`rows`)
        self.steps: list[float] = []
        self.losses: list[float] = []
        self.step = 0.0
        self.epoch: float | None = None
        self.max_workers = 0
        self.curve: LossCurve | None = None
        self._curve_points = 0
        self.version = 0
        self._rates = TypeRates()  # (`rates`)
        self._held: tuple[Allocation, tuple[int, int, int], Config] | None = None  # the last allocation, its config
        # (allocation, steps/s, row) of the last report whose row's mean is now its own speed's `y` (a repeat of it
        # only counts), else None
        self._repeat: tuple[Allocation, float, Config] | None = None
        # Counted repeats kept aside (`tally`): on `_repeat`'s row, on GPU type `_tally_type`, whose own rate's
        # mean is their speed; not yet in the row's count nor in the rate's (`settle`: `rows`, `rates` read settled)
        self._tally = 0
        self._tally_type = ""

    @property
    def rows(self) -> dict[Config, Row]:
        """Mean `y` and count per configuration (settled: `tally`)."""
        if self._tally:
            self.settle()
        return self._rows

    @property
    def rates(self) -> TypeRates:
        """Steps/s per configuration and GPU type (settled: `tally`)."""
        if self._tally:
            self.settle()
        return self._rates

    def config(self, alloc: Allocation, batch: float) -> Config:
        """`config_of`, with the shape of the last allocation kept (a job reports from one many times)."""
        held = self._held
        if held is None or held[0] is not alloc:
            shape = _shape_of(alloc)
            held = self._held = (alloc, shape, Config(*shape, batch=batch))
        elif held[2].batch != batch:
            held = self._held = (alloc, held[1], Config(*held[1], batch=batch))
        return held[2]

    def observe(self, report: Report, alloc: Allocation | None) -> bool:
        """Record one report; True when the speed rows changed shape (a new configuration) or a row's count
        reached a power of two (a refit)."""
        if self._tally:
            self.settle()
        last = self.repeated(report, alloc)
        if last is not None:
            return self.count(last[2], report.step)
        self.version += 1
        self.step = float(report.step)
        if report.epoch is not None:
            self.epoch = report.epoch
        fresh = not self.steps or report.step > self.steps[-1]
        if report.loss is not None and math.isfinite(report.loss) and fresh:
            self.steps.append(float(report.step))
            self.losses.append(report.loss)
            if len(self.steps) > MAX_LOSS_POINTS:  # thin the older half
                half = len(self.steps) // 2
                self.steps = self.steps[:half:2] + self.steps[half:]
                self.losses = self.losses[:half:2] + self.losses[half:]
                self._curve_points = min(self._curve_points, len(self.steps))
        if self.noise is not None:
            self.noise.observe(report.grad_sqr, report.grad_var, report.batch)
        speed = report.steps_per_s
        if not alloc or speed is None or speed <= 0 or not math.isfinite(speed):
            return False
        c = self.config(alloc, float(report.batch) if report.batch else self.batch)
        self.max_workers = max(self.max_workers, c.workers)
        y = time_like(self.form, c, speed)
        old = self._rows.get(c)
        row = self._rows[c] = Row(c, y, 1) if old is None else Row(c, old.y + (y - old.y) / (old.count + 1),
                                                                     old.count + 1)
        self._repeat = (alloc, speed, c) if row.y == y and not report.batch else None
        n = row.count
        return (n & (n - 1)) == 0  # a new row (n = 1); refit at counts 2, 4, 8, ...: cheap and still converging

    def repeated(self, report: Report, alloc: Allocation | None) -> tuple[Allocation, float, Config] | None:
        """(allocation, steps/s, row) of the last report where this one repeats it and is only counted
        (`count_repeats`), else None."""
        last = self._repeat
        if last is not None and last[0] is alloc and last[1] == report.steps_per_s and report.loss is None \
                and report.epoch is None and report.batch is None and self.noise is None and self.count_repeats:
            return last  # (the general path's config, maximum workers and `y` would be the last report's)
        return None

    def count(self, c: Config, step: int) -> bool:
        """A counted repeat on row `c` (`repeated`): the version, step and row's count move, its mean stays;
        True at a count that is a power of two (`observe`'s refit)."""
        self.version += 1
        self.step = float(step)
        row = self._rows[c]
        n = row.count + 1
        self._rows[c] = Row(c, row.y, n)
        return (n & (n - 1)) == 0

    def tally(self, report: Report, gpu_type: str) -> tuple[Allocation, float, Config] | None:
        """A counted repeat on `report.allocation` (`repeated`) whose GPU type's own rate's mean is its speed,
        kept aside: the version and step move now; the row's count and the rate's (`add` of its mean moves only
        its count: `m + 0.0 / n` is `m`) at the next read of `rows` or `rates` (`settle`). Answers `repeated`'s;
        None (nothing moved) where the count would reach a power of two (`observe`'s refit), the rate's mean is
        not the speed, or another GPU type's repeats are kept aside."""
        last = self.repeated(report, report.allocation)
        if last is None:
            return None
        k = self._tally
        c = last[2]
        n = self._rows[c].count + k + 1
        if (n & (n - 1)) == 0:
            return None
        if not k:  # (while repeats are kept aside the rate's mean stays theirs: checked when the first was)
            per_type = self._rates.rows.get(c)
            rate = per_type.get(gpu_type) if per_type is not None else None
            if rate is None or rate[0] != last[1]:
                return None
            self._tally_type = gpu_type
        elif gpu_type != self._tally_type:
            return None
        self._tally = k + 1
        self.version += 1
        self.step = float(report.step)
        return last

    def settle(self) -> None:
        """Add the repeats kept aside (`tally`) to their row's count and their GPU type's own rate's."""
        k, last = self._tally, self._repeat
        if k and last is not None:  # (`_repeat` moves only in `observe`, which settles first)
            c = last[2]
            row = self._rows[c]
            self._rows[c] = Row(c, row.y, row.count + k)
            self._rates.repeat(c, self._tally_type, k)
        self._tally = 0

    def loss_curve(self) -> LossCurve | None:
        """Refit when the points grew by a fifth since the last fit."""
        n = len(self.steps)
        if n >= 5 and (self.curve is None or n >= self._curve_points * 1.2 or n < self._curve_points):
            self.curve = fit_loss_curve(self.steps, self.losses) or self.curve
            self._curve_points = n
        return self.curve


def _below_own_min(form: Form, own: Sequence[Row], prior: SpeedPredictor | None,
                   max_workers: int) -> tuple[SpeedPredictor | None, str]:
    """A job's speed before its own fit: its type's prior fit scaled to its own points, else linear scaling."""
    if prior is not None:
        if not own:
            return prior, "type prior"
        ratios = [prior.steps_per_s(r.config) * r.y for r in own]  # predicted / observed speed
        ratios = [x for x in ratios if x > 0]
        if not ratios:
            return prior, "type prior"
        factor = math.exp(-sum(math.log(x) for x in ratios) / len(ratios))
        return Scaled(prior, factor), "type prior"
    if own:
        ref = max(own, key=lambda r: (r.config.workers, r.config.ps))
        g = max(ref.config.workers, 1) if form is Form.PS_ASYNC else 1.0
        return LinearScaling(ref.config, g / ref.y, cap=2 * max_workers), "linear scaling"
    return None, "none"


class _Kept(Generic[_O, _T]):
    """A field computed on its first read and kept as the instance's own attribute, read as one from then on.

    A non-data descriptor (no `__set__`): the instance `__dict__` entry it writes wins over it at the next read.
    Why not a property: a policy reads a running job's model several times a decision; nor `cached_property`:
    its lock (Python 3.11) costs more than the first read it guards."""

    def __init__(self, compute: Callable[[_O], _T]) -> None:
        self._compute = compute
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, model: _O, owner: type | None = None) -> _T:
        value = model.__dict__[self._name] = self._compute(model)
        return value


def _step(model: JobModel) -> float:
    """`LazyJobModel.step`: its learner's where it is live (moved by the job's own reports alone, each of which
    republishes it: `ModelBook.republished`), else the step it was built at."""
    d = model.__dict__
    learner: JobLearner | None = d["_learner"]
    return d["step"] if learner is None else learner.step


class LazyJobModel(JobModel):
    """A `JobModel` whose speed, basis and remaining steps are computed on first read.

    Most reports' models are replaced by the job's next report before any
    snapshot reads them. The inputs are captured when it is published (its own
    rows, its type's prior fit, its progress): the book moves on before a
    snapshot reads it, so it reads as the eager `ModelBook.model` did then.

    `live` (`ModelBook.republished`): `step` is read from its learner. A job's step moves at each of its
    reports, and a caller that republishes the job's model at each report before a snapshot reads it (`Learning`)
    reads at a decision the step a model built then would hold. That lets `renew` keep the model object when
    nothing else a reader may have read moved: every cache kept by model identity (`las.RemainingOrder`'s keys,
    backfill's predictions) still serves. A live model kept past its snapshot reads the latest step (as
    `LiveJobView`s do). Not live (`ModelBook.published`): the step it was built at.
    """

    def __init__(self, learner: JobLearner, own: tuple[Row, ...], prior: SpeedPredictor | None,
                 target: Target, type_speed: Mapping[str, float], curve: LossCurve | None, live: bool = False) -> None:
        set_fields(self, dict(  # (frozen: fields are set once, here, in one call: one per report)
            job_id=learner.job_id, form=learner.form, batch=learner.batch, step=learner.step, configs=len(own),
            curve=curve, type_speed=type_speed, goodput=None, max_workers=learner.max_workers,
            _inputs=(own, prior, target, learner.epoch), _got=None, _learner=learner if live else None))

    def renew(self, learner: JobLearner, own: tuple[Row, ...], prior: SpeedPredictor | None, target: Target,
              type_speed: Mapping[str, float], curve: LossCurve | None) -> bool:
        """Whether this live model of `learner`, renewed, reads as one built now from these inputs would, field by
        field; if so it takes them (for what is still to be computed on first read).

        The plain fields must be equal (`configs`, `max_workers`) or the same objects (`curve`, `type_speed`).
        Speed and basis, once read, must follow from equal inputs (`_below_own_min` reads the rows' configs
        and means, the prior fit and `max_workers`); unread, nobody saw them and they follow the new inputs.
        The remaining steps, once read, must equal what they are now (`step` is live: no target, none either
        way; a steps target moves with every report and builds a new model)."""
        d = self.__dict__
        if d["_learner"] is not learner or d["configs"] != len(own) or d["max_workers"] != learner.max_workers \
                or d["curve"] is not curve or d["type_speed"] is not type_speed:
            return False
        if d["_got"] is not None:
            had, had_prior = d["_inputs"][0], d["_inputs"][1]
            if had_prior is not prior or any(a.config != b.config or a.y != b.y for a, b in zip(had, own, strict=True)):
                return False
        if "remaining" in d and d["remaining"] != remaining_steps(
                target, Progress(step=learner.step, epoch=learner.epoch, curve=curve)):
            return False
        d["_inputs"] = (own, prior, target, learner.epoch)
        return True

    def _speed_basis(self) -> tuple[SpeedPredictor | None, str]:
        got: tuple[SpeedPredictor | None, str] | None = self.__dict__["_got"]
        if got is None:
            own, prior, _, _ = self.__dict__["_inputs"]
            got = _below_own_min(self.form, own, prior, self.max_workers)
            object.__setattr__(self, "_got", got)
        return got

    def _remaining(self) -> float | None:
        _, _, target, epoch = self.__dict__["_inputs"]
        return remaining_steps(target, Progress(step=self.step, epoch=epoch, curve=self.curve))

    step = property(_step)  # type: ignore[assignment]
    speed = _Kept["LazyJobModel", "SpeedPredictor | None"](lambda self: self._speed_basis()[0])  # type: ignore[assignment]
    basis = _Kept["LazyJobModel", str](lambda self: self._speed_basis()[1])  # type: ignore[assignment]
    remaining = _Kept["LazyJobModel", "float | None"](_remaining)  # type: ignore[assignment]


class ModelBook:
    """Every job's learner, the per-type priors, and the published `JobModel`s."""

    def __init__(self, *, own_min: int = 3, prior_weight: float = 1.0, use_priors: bool = True) -> None:
        self.own_min = own_min  # distinct own configurations before the job's own fit is trusted
        self.prior_weight = prior_weight  # total weight of siblings' rows in a job's own fit (one row = 1)
        self.use_priors = use_priors
        # A job's own fit solved when its coefficients are first read (`speed.deferred_fit`), not when it is
        # asked for: on Philly nobody reads a running job's speed. False: solved at once (the reference).
        self.defer_own_fits = True
        self.learners: dict[str, JobLearner] = {}
        self.priors = TypePriors()
        self.type_rates: dict[str, TypeRates] = {}  # job type -> its jobs' speeds per GPU type
        self._speed: dict[str, tuple[SpeedPredictor | None, str]] = {}
        self._speed_tag: dict[str, tuple[int, int | None]] = {}  # job -> (its version, its prior's) of `_speed`
        self._law: dict[str, tuple[SpeedPredictor | None, str]] = {}  # `_speed`'s twin for `speed(optimistic=True)`
        self._law_tag: dict[str, tuple[int, int | None]] = {}

    def learner(self, job_id: str, spec: JobSpec) -> JobLearner:
        found = self.learners.get(job_id)
        if found is None:
            found = self.learners[job_id] = JobLearner(job_id, spec)
        return found

    def observe(self, job_id: str, spec: JobSpec, report: Report, alloc: Allocation | None = None,
                gpu_type: str | None = None, moving: Callable[[str], None] | None = None) -> bool:
        """Learn from one report; `gpu_type`: the one GPU type its allocation ran on (None: mixed or unknown).

        True when the job's speed is fitted afresh from now (its rows changed shape or a count doubled): an own
        fit is then kept from the first `model` built, with the rows of that moment, so a caller that builds
        models later builds this one now.

        `moving`: called with the job's type just before this report changes what the type's other jobs'
        models are built from (its prior's rows; its pooled GPU-type rates once they hold two types, below
        which `type_speed` reads none): a caller that builds their models later builds them first.
        """
        learner = self.learners.get(job_id) or self.learner(job_id, spec)
        held = report.allocation or alloc
        speed = report.steps_per_s
        if gpu_type is not None and speed is not None and speed > 0 and held and math.isfinite(speed):
            c = learner.config(held, learner.batch)
            learner.rates.add(c, gpu_type, speed)
            if spec.job_type:
                pooled = self.type_rates.get(spec.job_type)
                if pooled is None:  # (not `setdefault`: a TypeRates built per report only to be dropped)
                    pooled = self.type_rates[spec.job_type] = TypeRates()
                types = pooled.types
                if moving is not None and types and (len(types) > 1 or gpu_type not in types):
                    moving(spec.job_type)
                pooled.add(c, gpu_type, speed)
        if not learner.observe(report, held):
            return False
        self._speed.pop(job_id, None)
        self._law.pop(job_id, None)
        if self.use_priors and spec.job_type:
            if moving is not None:
                moving(spec.job_type)
            self.priors.update(spec.job_type, learner.form, job_id, learner.rows, learner.local_max)
        return True

    def repeat(self, job_id: str, job_type: str | None, report: Report, gpu_type: str) -> JobLearner | None:
        """`observe` of a report its job's learner only counts (`JobLearner.tally`), where `observe` would neither
        refit nor call `moving`: the learner's count, version and step and the pooled rate move, nothing else;
        answers the learner. None (nothing moved): the caller takes `observe`. A repeat is on
        `report.allocation` (not the caller's fallback); `job_type`: the spec's, `gpu_type`: as for `observe`.

        Exact: on a repeat `observe`'s config is the learner's kept one (`_repeat`'s allocation is held), its
        speed is valid (`_repeat` is set only then), and its `moving` is called only where the pooled rates hold
        another type than `gpu_type` (checked here)."""
        learner = self.learners.get(job_id)
        if learner is None:
            return None
        pooled = self.type_rates.get(job_type) if job_type else None
        if job_type:
            types = pooled.types if pooled is not None else None
            if types is None or len(types) > 1 or gpu_type not in types:
                return None
        last = learner.tally(report, gpu_type)
        if last is None:
            return None
        if pooled is not None:
            pooled.add(last[2], gpu_type, last[1])
        return learner

    def forget(self, job_id: str) -> None:
        """Drop a finished job's learner; its rows stay in its type's prior."""
        self.learners.pop(job_id, None)
        self._speed.pop(job_id, None)
        self._speed_tag.pop(job_id, None)
        self._law.pop(job_id, None)
        self._law_tag.pop(job_id, None)

    def speed(self, learner: JobLearner, optimistic: bool = False) -> tuple[SpeedPredictor | None, str]:
        """The job's speed law and its basis; `optimistic`: the goodput law's (`speed.fit(cross_slope=False)`)."""
        cache, tags = (self._law, self._law_tag) if optimistic else (self._speed, self._speed_tag)
        cached = cache.get(learner.job_id)
        if cached is not None and cached[1] == "own fit":  # the others change as the type's prior learns
            return cached
        # The others follow the job's reports and its type's prior only: kept while neither changed (a
        # prior that learns republishes every sibling's model; most of them have no reports of their own).
        job_type = learner.spec.job_type if self.use_priors else None
        tag = (learner.version, self.priors.version.get((job_type, learner.form)) if job_type else None)
        if cached is not None and tags.get(learner.job_id) == tag:
            return cached
        out = self._fit_speed(learner, cross_slope=not optimistic)
        cache[learner.job_id] = out
        tags[learner.job_id] = tag
        return out

    def _fit_speed(self, learner: JobLearner, cross_slope: bool = True) -> tuple[SpeedPredictor | None, str]:
        """The job's speed law (`cross_slope=False`: its goodput law, which counts micro-batches, `_own_law`)."""
        own = list(learner.rows.values())
        job_type = learner.spec.job_type if self.use_priors else None
        need = N_PARAMS[learner.form]
        if len(own) >= self.own_min:
            # Siblings' points share this job's law only when the batch is a known feature.
            pooled = job_type is not None and learner.batch_known
            siblings = self.priors.rows(job_type, learner.form, exclude=learner.job_id) if job_type and pooled else []
            weights = [1.0] * len(own) + [self.prior_weight / max(len(siblings), 1)] * len(siblings)
            if not cross_slope and learner.form is Form.ALLREDUCE:
                return self._own_law(learner, own, siblings, weights), "own fit"
            solve = deferred_fit if self.defer_own_fits else fit
            return solve(learner.form, own + siblings, weights, cross_slope=cross_slope), "own fit"
        prior = self.priors.fitted(job_type, learner.form, need, cross_slope) if job_type else None
        if not cross_slope:
            prior = for_local_max(prior, learner.local_max)
        return _below_own_min(learner.form, own, prior, learner.max_workers)

    def _own_law(self, learner: JobLearner, own: list[Row], siblings: list[Row],
                 weights: list[float]) -> SpeedPredictor | None:
        """An all-reduce goodput law from the job's rows and its siblings', each row's micro-batches counted with
        its job's local-batch cap (`priors.TypePriors`)."""
        caps: list[int | None] = [learner.local_max] * len(own)
        if siblings:
            caps += self.priors.local_maxes(learner.spec.job_type or "", learner.form, exclude=learner.job_id)
        table = [goodput_features(r.config, m) for r, m in zip(own + siblings, caps, strict=True)]
        return for_local_max(fit(learner.form, own + siblings, weights, cross_slope=False, table=table),
                             learner.local_max)

    def unreported_speed(self, learner: JobLearner, fit: SpeedPredictor | None) -> tuple[SpeedPredictor | None, str]:
        """`speed` of a job without reports whose type's prior fit is `fit` (the caller looked it up once per type)."""
        if learner.version or self.own_min <= 0 or not self.use_priors:
            return self.speed(learner)
        return _below_own_min(learner.form, (), fit, 0)

    def model(self, job_id: str, spec: JobSpec, speed_basis: tuple[SpeedPredictor | None, str] | None = None,
              type_speed: Mapping[str, float] | None = None) -> JobModel:
        """The job's model now; `speed_basis`: what `speed` (or `unreported_speed`) just gave for it; `type_speed`:
        what `type_speed` just gave for it."""
        learner = self.learner(job_id, spec)
        speed, basis = self.speed(learner) if speed_basis is None else speed_basis
        curve = learner.loss_curve()
        left = remaining_steps(spec.target, Progress(step=learner.step, epoch=learner.epoch, curve=curve))
        goodput = None
        noise = learner.noise
        phi = noise.phi if noise is not None else None
        if phi is not None and speed is not None and basis in GOODPUT_BASES and spec.adaptive_batch is not None \
                and learner.rows:
            # Only a fitted law knows how speed moves with the batch (linear scaling would pick the largest);
            # its type's fit (siblings ran at other batches) serves until the job's own, near its own points.
            local: dict[bool, list[float]] = {}
            for r in learner.rows:
                local.setdefault(r.nodes > 1, []).append(r.batch / max(r.workers, 1))
            ranges = tuple((multi, min(v), max(v)) for multi, v in sorted(local.items()))
            law = self.speed(learner, optimistic=True)[0] if learner.form is Form.ALLREDUCE else speed
            goodput = GoodputSpeed(law or speed, spec.adaptive_batch, phi, ranges, noise.at if noise else 0.0)
        return JobModel(job_id=job_id, form=learner.form, batch=learner.batch, speed=speed, basis=basis,
                        step=learner.step, remaining=left, configs=len(learner.rows), curve=curve,
                        type_speed=self.type_speed(learner) if type_speed is None else type_speed, goodput=goodput,
                        max_workers=learner.max_workers)

    def unreported_model(self, learner: JobLearner, spec: JobSpec, speed_basis: tuple[SpeedPredictor | None, str],
                         type_speed: Mapping[str, float], made: dict[tuple[object, ...], JobModel]) -> JobModel:
        """`model` of a job without reports, given its speed (`unreported_speed`) and its type's `type_speed`.

        Without reports a model is its form, batch, target and type's prior alone: jobs alike share one
        built by `model`, kept in `made` (the caller's, for as long as the speed and type speeds hold), and
        each gets a copy with its own id (`set_fields`: without the frozen dataclass's field-by-field init).
        """
        if learner.version:
            raise ValueError(f"unreported_model: job {learner.job_id} has reports; ask `model`")
        left = remaining_steps(spec.target, Progress(step=0.0))
        key = (learner.form, learner.batch, left, id(speed_basis[0]), speed_basis[1], id(type_speed))
        template = made.get(key)
        if template is None:
            template = made[key] = self.model(learner.job_id, spec, speed_basis, type_speed)
            return template
        return set_fields(object.__new__(JobModel), {**template.__dict__, "job_id": learner.job_id})

    def published(self, job_id: str, spec: JobSpec) -> JobModel:
        """`model` for a job that just reported, its speed and remaining computed on first read where that is exact.

        Below `own_min` configurations (and without goodput, which reads the speed) the speed follows the
        job's rows and its type's prior fit only: both are captured now. An own fit is computed at once (and
        kept by `speed` until the job's rows change shape).
        """
        learner = self.learner(job_id, spec)
        if spec.adaptive_batch is not None or len(learner.rows) >= self.own_min:
            return self.model(job_id, spec)
        return LazyJobModel(learner, *self._lazy_inputs(learner, spec))

    def republished(self, job_id: str, spec: JobSpec, last: JobModel | None) -> JobModel:
        """`published` for a job that reported since `last` (its model then, or None) was: `last` itself where
        it reads as a model built now would (`LazyJobModel.renew`), so caches kept by model identity serve; a
        new `LazyJobModel` is live (its step read from the learner): the caller republishes at each report."""
        learner = self.learner(job_id, spec)
        if spec.adaptive_batch is not None or len(learner.rows) >= self.own_min:
            return self.published(job_id, spec)
        inputs = self._lazy_inputs(learner, spec)
        if type(last) is LazyJobModel and last.renew(learner, *inputs):
            return last
        return LazyJobModel(learner, *inputs, live=True)

    def _lazy_inputs(self, learner: JobLearner, spec: JobSpec) -> tuple[
            tuple[Row, ...], SpeedPredictor | None, Target, Mapping[str, float], LossCurve | None]:
        """What a `LazyJobModel` of the job is built from now: its rows, its type's prior fit, its target, its
        GPU-type speeds and its loss curve (refitted here when its points grew: once per model built)."""
        job_type = spec.job_type if self.use_priors else None
        prior = self.priors.fitted(job_type, learner.form, N_PARAMS[learner.form]) if job_type else None
        return tuple(learner.rows.values()), prior, spec.target, self.type_speed(learner), learner.loss_curve()

    def pooled_types(self, job_type: str) -> frozenset[str]:
        """The GPU types its job type's reports ran on (what a job without reports takes `type_speed` from)."""
        rates = self.type_rates.get(job_type) if self.use_priors else None
        return rates.types if rates is not None else frozenset()

    def type_speed(self, learner: JobLearner) -> Mapping[str, float]:
        """Relative speed per GPU type from the job's own reports, else its job type's; empty below two types."""
        own = learner.rates
        pooled = self.type_rates.get(learner.spec.job_type) if learner.spec.job_type and self.use_priors else None
        rates = own if len(own.types) > 1 or pooled is None else pooled
        if len(rates.types) < 2:
            return _NO_TYPE_SPEED
        return MappingProxyType(relative_speeds(rates))
