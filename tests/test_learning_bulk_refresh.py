"""`Learning.refresh` republishes a type's waiting jobs in C-level passes (`Learning.bulk`), exactly.

On a busy cluster thousands of jobs wait without reports, and every refit of their type's prior republishes
each one (Philly on 80x8: ~55 models a decision, ~17% of the run one by one). Replays with and without the
bulk path: every snapshot's models (all fields, and what a policy reads of them) and every plan, its
allocation order and its waits must be equal, and the bulk path must have served.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import Recorder, same_plans
from tests.test_learning_refresh import Seen, _seen

from trainmaster.cli.simulate import LEARNING_REPORT_INTERVAL
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel
from trainmaster.policies import trainmaster
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.ps_truth import ps_workload

N, CYCLES = 400, 1000  # (Philly's jobs run for hours: the whole prefix would take 10^5 decisions)


class _Models(Recorder):
    """A `Recorder` that also keeps every snapshot's models: as objects and as a policy reads them."""

    def __init__(self, cycle: Cycle) -> None:
        super().__init__(cycle)
        self.models: list[dict[str, JobModel]] = []
        self.seen: list[dict[str, Seen]] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        self.models.append(dict(snapshot.models))
        self.seen.append({jid: _seen(m) for jid, m in snapshot.models.items()})
        return super().decide(snapshot)


def replay(preset: str, workload: Workload, cluster: str, bulk: bool, cycles: int | None = None
           ) -> tuple[_Models, int]:
    """The recorder of one run (of at most `cycles` decisions), and how many types `refresh` republished in bulk."""
    cycle: Cycle = Optimus().cycle if preset == "optimus" else trainmaster.make()
    recorder = _Models(cycle)
    recorder.uses_models = True
    engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
    controller = Controller(engine, recorder)
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.bulk = bulk
    controller.run(max_cycles=cycles)
    return recorder, learning.bulk_served


def _same(fast: _Models, slow: _Models) -> None:
    same_plans(fast.plans, slow.plans)
    assert len(fast.models) == len(slow.models)
    for a, b, sa, sb in zip(fast.models, slow.models, fast.seen, slow.seen, strict=True):
        assert list(a) == list(b)  # (the same jobs, in the same order)
        assert a == b  # (every field: `JobModel` compares as a dataclass)
        assert [type(m) for m in a.values()] == [type(m) for m in b.values()]
        assert sa == sb
        assert all(m.job_id == jid for jid, m in a.items())


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_bulk_refresh_publishes_the_loops_models_ps(preset: str) -> None:
    """PS jobs with loss targets, sync and async (two forms in a type: the loop serves those), batches that
    differ, models that predict and jobs that resize."""
    fast, served = replay(preset, ps_workload(60, rate_per_hour=60, seed=3), "2x4", True)
    slow, none = replay(preset, ps_workload(60, rate_per_hour=60, seed=3), "2x4", False)
    _same(fast, slow)
    assert none == 0 and served > 0


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_bulk_refresh_publishes_the_loops_models_philly(preset: str, shared_data: Path) -> None:
    """A Philly prefix on a small cluster, its first decisions: a long line of jobs of a few types, waiting
    without reports of their own while their types' priors learn."""
    def workload() -> Workload:  # (arrivals every 10 s: the line forms within the decisions replayed)
        trace = load_workload(str(shared_data / "pollux" / "philly.csv"), limit=N)
        return replace(trace, jobs=tuple(replace(j, submit_time=10.0 * k) for k, j in enumerate(trace.jobs)))

    fast, served = replay(preset, workload(), "8x8", True, CYCLES)
    slow, none = replay(preset, workload(), "8x8", False, CYCLES)
    _same(fast, slow)
    assert none == 0 and served > 5
    waiting = [sum(m.basis == "type prior" and m.step == 0 for m in snap.values()) for snap in fast.models]
    assert max(waiting) > 100  # many jobs waited on their type's prior
