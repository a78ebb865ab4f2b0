"""The goodput oracle: trainmaster sized on the truth's goodput instead of its fitted laws (issue 11, eleventh look).

Where the remaining gap to Pollux lives: in how the goodput law is *learned*
(priors, exploration, fits from few sizes) or in the *policy* (objective,
restart charges, rounds, caps). This replays Pollux workloads under
`--fidelity pollux` exactly as `bench.presets` does, with the controller's
`ModelBook` swapped for an `OracleBook`: every adaptive job's published model
predicts, at any candidate (replicas, nodes, batch), the steps/s the sim
engine will run it at (`PeerTruth.at_counts`: the peer's step time and the
epoch's statistical-efficiency gain, `workloads/pollux_peer.py`), its
remaining steps are the truth's, and it has them from submission (no
reports needed). Nothing else changes: the same preset, greedy, restart
penalty, rounds and batch choice read it. A mode is `WHAT[-reported][-free]`:
WHAT is `fitted` (the preset as users get it), `oracle` (the truth's goodput
and remaining steps), `throughput` (the truth's steps/s inside the job's
fitted goodput law, its noise scale still learned: only once it reported),
`efficiency` (the fitted steps/s times the truth's gain now: likewise) or
`remaining` (only the remaining steps from the truth); `-reported`: the truth
only once the job has reported (its first start as fitted); `-free`: Pollux's
exploration pace lifted (`optimus.EXPLORE` x the most workers the job reported
from: it exists because a fitted law is unsure far from its points). Mode `nocap`:
fitted, the jobs declaring no local-batch cap (`BatchRange.local_max`): the goodput law before the
fourteenth look, which counts no micro-batches (`fitted` is the product's, which does). Modes
`part-P` (fifteenth look): the fitted goodput law (its trust region kept), but the truth's steps/s
at the sizes of one part P of `bench.law_audit`'s regimes only: `unseen-multi` (multi-node
(workers, nodes) the job has not run), `unseen-one` or `seen`: what that part's law error costs.
`unseen-one` splits (best26) into `unseen-below` (one-node sizes under the most workers the job ran:
interpolation), `unseen-above` (one-node sizes over it: extrapolation up to a node) and `unseen-first`
(one-node sizes of a job that has run nothing yet: its type prior's speed, read for its first size).

Bench-only: users' controllers always build their own `ModelBook`.

    .venv/bin/python -m bench.oracle_goodput [--modes fitted,oracle,oracle-free] [--loads 0.5,1,2]
        [--workloads 1-4] [--settings elastic,elastic-free]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bench.presets import CLUSTER, SETTINGS, parse_range, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import JobSpec
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.models.book import JobLearner, JobModel, ModelBook, set_fields
from trainmaster.models.goodput import GoodputSpeed
from trainmaster.models.speed import Config, SpeedPredictor
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import Workload
from trainmaster.workloads.pollux_peer import PeerTruth

WHAT = ("fitted", "oracle", "throughput", "efficiency", "remaining")
# where `part-P` lets the truth's steps/s in (`PartSteps`); `unseen-one` = `unseen-below` + `unseen-above`
PARTS = ("unseen-multi", "unseen-one", "seen", "unseen-below", "unseen-above", "unseen-first")
MODES = (*(f"{w}{r}{f}" for w in WHAT for r in ("", "-reported") for f in ("", "-free")), "nocap",
         *(f"part-{p}" for p in PARTS))
NODE_GPUS = 4  # the cluster's GPUs per node (CLUSTER = 16x4)
UNPACED = 1 << 20  # `max_workers` that lifts `Optimus`'s exploration pace (`oracle-free`)


def counts_of(workers: int, nodes: int, per_node: int = NODE_GPUS) -> list[int]:
    """Replicas per node for a (workers, nodes) candidate: packed when `nodes` is the fewest, else spread evenly."""
    w, n = max(workers, 1), max(nodes, 1)
    if n <= -(-w // per_node):
        full, rest = divmod(w, per_node)
        return [per_node] * full + ([rest] if rest else [])
    base, extra = divmod(w, n)
    return [base + 1] * extra + [base] * (n - extra) if base else [1] * w


@dataclass(frozen=True, eq=False)
class TruthGoodput(GoodputSpeed):
    """`GoodputSpeed` whose goodput at (config, batch) is the truth's rate there, `done` steps into the job."""

    truth: PeerTruth | None = None
    done: float = 0.0

    def goodput(self, c: Config, batch: float) -> float:
        assert self.truth is not None
        return self.truth.at_counts(counts_of(c.workers, c.nodes), int(batch), self.done).rate

    def trusted(self, c: Config) -> tuple[float, float] | None:
        return None  # the truth is known at every local batch: no trust region


@dataclass(frozen=True)
class TruthSteps:
    """The truth's optimizer steps/s at a candidate's own batch (throughput only; no statistical efficiency)."""

    truth: PeerTruth

    def steps_per_s(self, c: Config) -> float:
        return self.truth.at_counts(counts_of(c.workers, c.nodes), int(c.batch), 0.0).steps_per_s


@dataclass(frozen=True, eq=False)
class TruthEfficiency(GoodputSpeed):
    """The fitted throughput law times the truth's statistical-efficiency gain now (`done` steps in)."""

    truth: PeerTruth | None = None
    done: float = 0.0

    def goodput(self, c: Config, batch: float) -> float:
        assert self.truth is not None
        run = self.truth.at_counts(counts_of(c.workers, c.nodes), int(batch), self.done)
        return self.speed.steps_per_s(c._replace(batch=float(batch))) * run.rate / run.steps_per_s


@dataclass(frozen=True)
class PartSteps:
    """The truth's steps/s at the sizes of one `PARTS` regime of a job (its `seen` shapes), `fitted`'s elsewhere."""

    fitted: SpeedPredictor
    truth: PeerTruth
    seen: frozenset[tuple[int, int]]
    part: str

    def steps_per_s(self, c: Config) -> float:
        if self.part not in regimes(c, self.seen):
            return self.fitted.steps_per_s(c)
        return self.truth.at_counts(counts_of(c.workers, c.nodes), int(c.batch), 0.0).steps_per_s


def regimes(c: Config, seen: frozenset[tuple[int, int]]) -> tuple[str, ...]:
    """The `PARTS` a candidate (workers, nodes) is in, for a job that ran the shapes `seen` (empty: none yet)."""
    if (c.workers, c.nodes) in seen:
        return ("seen",)
    if c.nodes > 1:
        return ("unseen-multi",)
    if not seen:
        return ("unseen-first",)
    below = c.workers < max(w for w, _ in seen)
    return ("unseen-one", "unseen-below" if below else "unseen-above")


class OracleBook(ModelBook):
    """A `ModelBook` whose adaptive jobs' models read the truth (module doc); others as fitted.

    `law`: "goodput" (the truth's goodput and remaining steps), "throughput" (the truth's steps/s in
    the job's fitted goodput law, its noise scale still learned from reports; only once it has one)
    or "" (fitted); `reported_only`: the truth only once the job has reported (before: its type's prior).
    """

    def __init__(self, truths: Mapping[str, PeerTruth], paced: bool = True, law: str = "goodput",
                 reported_only: bool = False) -> None:
        super().__init__()
        self.truths = truths
        self.paced = paced
        self.law = law
        self.reported_only = reported_only

    def model(self, job_id: str, spec: JobSpec, speed_basis: tuple[SpeedPredictor | None, str] | None = None,
              type_speed: Mapping[str, float] | None = None) -> JobModel:
        fitted = super().model(job_id, spec, speed_basis, type_speed)
        truth = self.truths.get(job_id) if self.law else None
        learner = self.learner(job_id, spec)
        if truth is not None and self.law == "part-unseen-first":  # the type prior's speed, until the first report
            if learner.rows or fitted.speed is None or spec.adaptive_batch is None:
                return fitted
            fields = dict(fitted.__dict__)
            fields.update(speed=PartSteps(fitted.speed, truth, frozenset(), "unseen-first"))
            return set_fields(object.__new__(JobModel), fields)
        if truth is not None and self.reported_only and not learner.rows:
            truth = None
        if spec.adaptive_batch is None or (truth is None and self.paced):
            return fitted
        fields = dict(fitted.__dict__)
        fields.update(max_workers=fitted.max_workers if self.paced else UNPACED)
        if truth is not None and self.law == "goodput":
            done = learner.step
            law = TruthGoodput(fitted.speed or _NoSpeed(), spec.adaptive_batch, math.nan, (), truth=truth, done=done)
            fields.update(speed=law, basis="oracle", goodput=law, remaining=max(truth.total_steps - done, 0.0))
        elif truth is not None and self.law == "efficiency" and fitted.goodput is not None:
            g = fitted.goodput
            fields.update(goodput=TruthEfficiency(g.speed, g.bounds, g.phi, g.local, truth=truth, done=learner.step))
        elif truth is not None and self.law.startswith("part-") and fitted.goodput is not None:
            g = fitted.goodput
            seen = frozenset((c.workers, c.nodes) for c in learner.rows)
            fields.update(goodput=GoodputSpeed(PartSteps(g.speed, truth, seen, self.law[5:]), g.bounds, g.phi, g.local,
                                               g.at))  # (`at`: the noise scale's batch, as the fitted law's)
        elif truth is not None and self.law == "remaining":
            fields.update(remaining=max(truth.total_steps - learner.step, 0.0))
        elif truth is not None and fitted.goodput is not None:  # "throughput"
            fields.update(goodput=GoodputSpeed(TruthSteps(truth), spec.adaptive_batch, fitted.goodput.phi, (),
                                               fitted.goodput.at))
        return set_fields(object.__new__(JobModel), fields)

    def unreported_model(self, learner: JobLearner, spec: JobSpec, speed_basis: tuple[SpeedPredictor | None, str],
                         type_speed: Mapping[str, float], made: dict[tuple[object, ...], JobModel]) -> JobModel:
        return self.model(learner.job_id, spec, speed_basis, type_speed)  # (each job its own truth: no sharing)

    def published(self, job_id: str, spec: JobSpec) -> JobModel:
        return self.model(job_id, spec)


class _NoSpeed:
    """Placeholder fitted law for a job with none yet (the oracle never reads it)."""

    def steps_per_s(self, c: Config) -> float:
        return 0.0


def replay(mode: str, load: float, index: int, setting: str, preset: str = "trainmaster") -> tuple[float, int, float]:
    """(mean JCT s of the succeeded jobs, jobs unfinished, CPU s) of one workload under `mode`."""
    started = time.process_time()
    wl = workload(load, index, SETTINGS[setting], False, "pollux")
    if mode == "nocap":
        wl = _without_caps(wl)
    engine = SimEngine(parse_shorthand(CLUSTER), wl, config_for(preset, sim_config("pollux")))
    controller = Controller(engine, make_policy(preset))
    if mode not in ("fitted", "nocap"):
        truths = {j.job_id: j.truth for j in wl.jobs if isinstance(j.truth, PeerTruth)}
        what = mode if mode.startswith("part-") else mode.split("-")[0]
        law = {"fitted": "", "oracle": "goodput"}.get(what, what)
        learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
        learning.book = OracleBook(truths, paced=not mode.endswith("-free"), law=law,
                                   reported_only="reported" in mode or what.startswith("part-"))
    controller.run()
    outcomes = controller.outcomes()
    jcts = [o.jct for o in outcomes if o.jct is not None and o.state.value == "succeeded"]
    return statistics.mean(jcts), len(outcomes) - len(jcts), time.process_time() - started


def _without_caps(wl: Workload) -> Workload:
    """The workload with every job's local-batch cap dropped (mode `nocap`)."""
    jobs = []
    for job in wl.jobs:
        adaptive = job.spec.adaptive_batch
        if adaptive is not None:
            job = replace(job, spec=replace(job.spec, adaptive_batch=replace(adaptive, local_max=None)))
        jobs.append(job)
    return replace(wl, jobs=tuple(jobs))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--loads", default="0.5,1,2")
    parser.add_argument("--workloads", default="1-4")
    parser.add_argument("--settings", default="elastic,elastic-free")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES):
        sys.exit(f"--modes takes WHAT[-reported][-free], WHAT one of {', '.join(WHAT)}")
    loads = [float(x) for x in args.loads.split(",") if x]
    settings = [s for s in args.settings.split(",") if s]
    indexes = parse_range(args.workloads)
    cpu = 0.0
    print(f"| setting | mode | {' | '.join(f'load {x:g}' for x in loads)} |")
    print("| --- | --- |" + " ---: |" * len(loads))
    for setting in settings:
        for mode in modes:
            cells = []
            for load in loads:
                runs = [replay(mode, load, n, setting) for n in indexes]
                cpu += sum(r[2] for r in runs)
                left = sum(r[1] for r in runs)
                per = " ".join(f"{r[0]:,.0f}" for r in runs)
                print(f"  {setting} {mode} load {load:g}: {per}", file=sys.stderr, flush=True)
                cells.append(f"{statistics.mean(r[0] for r in runs):,.0f}" + (f" ({left} unfinished)" if left else ""))
            print(f"| {setting} | {mode} | {' | '.join(cells)} |", flush=True)
    print(f"\n{cpu:,.0f} s CPU", file=sys.stderr)


if __name__ == "__main__":
    main()
