"""The goodput law with its fixed term counted per micro-batch, as if jobs declared their local-batch cap.

Bench-only (issue 11, thirteenth look): the next step's evidence before its plumbing. Under
`--fidelity pollux` a replica's local batch above its application's cap (yolov3 8, bert 12,
imagenet 200, deepspeech2 80, cifar10 1,024: the profiles' largest, `LOCAL_BATCH_CAP`) accumulates
`ceil(local / cap)` micro-batches, and one GPU above the smallest batch at least two
(`PeerModel.batching`); each pays the step's fixed cost. The law `T = a + b*m + sync` counts it once,
so rows at the submitted (large) batch and sizing's small local batches do not lie on one line
(cifar10's one-node sizes came out 40% slow, `bench.law_audit`). `MicroBook` fits the goodput law
(`speed.fit(cross_slope=False)`, own rows with siblings', or the type's rows below `own_min`) with the
first feature the micro-batch count instead of 1; everything else is the `ModelBook`'s. Users'
jobs do not declare the cap yet (`BatchRange` has no field for it): this reads it from the profiles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainmaster.models.book import JobLearner, ModelBook, _below_own_min
from trainmaster.models.speed import N_PARAMS, Config, Form, Row, SpeedPredictor, features, fit
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import peer_model

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def micro_batches(c: Config, cap: float, smallest: float) -> float:
    """Micro-batches per optimizer step of `c` (`PeerModel.batching`'s count)."""
    local = math.ceil(c.batch / max(c.workers, 1) - 1e-8)
    n = math.ceil(local / cap - 1e-8)
    if c.workers <= 1 and c.batch > smallest:
        n = max(n, 2)
    return float(max(n, 1))


def micro_features(c: Config, cap: float, smallest: float) -> tuple[float, ...]:
    """The all-reduce features with the fixed term once per micro-batch."""
    return (micro_batches(c, cap, smallest), *features(Form.ALLREDUCE, c)[1:])


@dataclass(frozen=True)
class MicroFit(SpeedPredictor):
    """A goodput law fitted on `micro_features`."""

    theta: tuple[float, ...]
    cap: float
    smallest: float

    def steps_per_s(self, c: Config) -> float:
        y = sum(t * x for t, x in zip(self.theta, micro_features(c, self.cap, self.smallest), strict=True))
        return 1.0 / y if y > 0 else 0.0


def profile_caps(profiles: Path) -> dict[str, tuple[float, float]]:
    """Job type -> (local-batch cap, smallest validated batch), from the Pollux profiles."""
    out = {}
    for app in APPS:
        model = peer_model(load_profile(profiles / app))
        out[app] = (model.cap, float(model.init_batch))
    return out


class MicroBook(ModelBook):
    """A `ModelBook` whose all-reduce goodput laws count micro-batches (module doc); the rest as fitted."""

    def __init__(self, caps: Mapping[str, tuple[float, float]]) -> None:
        super().__init__()
        self.caps = caps

    def _micro_fit(self, rows: Sequence[Row], weights: Sequence[float] | None, cap: float,
                   smallest: float) -> MicroFit | None:
        law = fit(Form.ALLREDUCE, rows, weights, cross_slope=False,
                  table=[micro_features(r.config, cap, smallest) for r in rows])
        return None if law is None else MicroFit(law.theta, cap, smallest)

    def _fit_speed(self, learner: JobLearner, cross_slope: bool = True) -> tuple[SpeedPredictor | None, str]:
        job_type = learner.spec.job_type
        if cross_slope or learner.form is not Form.ALLREDUCE or job_type is None or job_type not in self.caps:
            return super()._fit_speed(learner, cross_slope)
        cap, smallest = self.caps[job_type]
        own = list(learner.rows.values())
        if len(own) >= self.own_min:  # as `ModelBook._fit_speed`: own rows, siblings' weighing one row in all
            siblings = self.priors.rows(job_type, learner.form, exclude=learner.job_id) if learner.batch_known else []
            weights = [1.0] * len(own) + [self.prior_weight / max(len(siblings), 1)] * len(siblings)
            return self._micro_fit(own + siblings, weights, cap, smallest), "own fit"
        rows = self.priors.rows(job_type, learner.form)
        shapes = {(r.config.workers, r.config.ps, r.config.nodes) for r in rows}
        prior = self._micro_fit(rows, None, cap, smallest) if len(shapes) >= N_PARAMS[learner.form] else None
        return _below_own_min(learner.form, own, prior, learner.max_workers)
