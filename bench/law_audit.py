"""Where the goodput law is wrong in a replay: its steps/s against the truth at the sizes sizing weighs.

`bench.speed_predict` asks the law at sizes chosen by hand; this asks it where the trainmaster preset
does. It replays Pollux workloads under `--fidelity pollux` as `bench.presets` does, with a `ModelBook`
that, each time an adaptive job reports, evaluates that job's goodput law (`GoodputSpeed.speed`, the
`speed.fit(cross_slope=False)` fit sizing reads) at every packed size from 1 GPU to the exploration
pace (`optimus.EXPLORE` x the most workers it reported from), each at the batch the law picks there,
against the truth's optimizer steps/s (`PeerTruth.at_counts`). Printed per application and regime
(measured shape or not; one node or several; `--by-size`: also per worker count and the law's basis):
sizes asked, mean signed and mean absolute % error. Nothing in the replay changes: the book only reads.

    PYTHONPATH=src:. python -m bench.law_audit [--load 0.5] [--workloads 1-2] [--setting elastic] [--by-size]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from bench.oracle_goodput import counts_of
from bench.presets import CLUSTER, SETTINGS, parse_range, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import JobSpec
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.models.book import JobModel, ModelBook
from trainmaster.models.speed import Config
from trainmaster.policies.optimus import EXPLORE
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.pollux_peer import PeerTruth

NODE_GPUS = 4


class AuditBook(ModelBook):
    """A `ModelBook` that records its adaptive jobs' law errors at each report (module doc)."""

    def __init__(self, truths: Mapping[str, PeerTruth], by_size: bool = False) -> None:
        super().__init__()
        self.truths = truths
        self.by_size = by_size  # regimes split by workers and the law's basis (type prior or own fit)
        self.errors: dict[tuple[str, str], list[float]] = defaultdict(list)  # (app, regime) -> signed %

    def published(self, job_id: str, spec: JobSpec) -> JobModel:
        model = super().published(job_id, spec)
        truth = self.truths.get(job_id)
        g = model.goodput
        if truth is None or g is None:
            return model
        learner = self.learner(job_id, spec)
        seen = {(c.workers, c.nodes) for c in learner.rows}
        app = job_id.rsplit("-", 1)[0]
        for w in range(1, EXPLORE * max(learner.max_workers, 1) + 1):
            c = Config(workers=w, nodes=-(-w // NODE_GPUS))
            batch, _ = g.best(c)
            run = truth.at_counts(counts_of(w, c.nodes), int(batch), learner.step)
            predicted = g.speed.steps_per_s(c._replace(batch=float(batch)))
            regime = ("seen" if (w, c.nodes) in seen else "unseen") + ("-multi" if c.nodes > 1 else "-one")
            regime += f"{w} ({model.basis})" if self.by_size else ""
            self.errors[app, regime].append(100.0 * (predicted - run.steps_per_s) / run.steps_per_s)
        return model


def audit(load: float, index: int, setting: str, by_size: bool = False) -> dict[tuple[str, str], list[float]]:
    wl = workload(load, index, SETTINGS[setting], False, "pollux")
    engine = SimEngine(parse_shorthand(CLUSTER), wl, config_for("trainmaster", sim_config("pollux")))
    controller = Controller(engine, make_policy("trainmaster"))
    book = AuditBook({j.job_id: j.truth for j in wl.jobs if isinstance(j.truth, PeerTruth)}, by_size)
    next(s for s in controller.report_sinks if isinstance(s, Learning)).book = book
    controller.run()
    return book.errors


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--workloads", default="1-2")
    parser.add_argument("--setting", default="elastic")
    parser.add_argument("--by-size", action="store_true", help="split regimes by workers and the law's basis")
    args = parser.parse_args(argv)
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for index in parse_range(args.workloads):
        for key, errs in audit(args.load, index, args.setting, args.by_size).items():
            errors[key] += errs
    print("| application | regime | sizes asked | mean signed % | mean abs % |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (app, regime), errs in sorted(errors.items()):
        print(f"| {app} | {regime} | {len(errs)} | {statistics.mean(errs):+.1f} | "
              f"{statistics.mean(abs(e) for e in errs):.1f} |")
    every = [abs(e) for errs in errors.values() for e in errs]
    print(f"all: {len(every)} sizes, mean abs {statistics.mean(every):.1f}%")


if __name__ == "__main__":
    main()
