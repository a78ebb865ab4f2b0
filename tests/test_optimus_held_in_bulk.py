"""optimus' running jobs kept in bulk (`Workspace.assign_held`) plan exactly as assigned one by one.

Every decision re-decides from an empty cluster; the running jobs whose size is unchanged are put back where
they run. In bulk that is the snapshot's free capacity given back what the other active jobs hold: the same
free capacity, total and allocations in the same order. Contended workloads (a long line, resizes, preemption)
replay with and without it; every plan, its waits and the order of its allocations must be equal.
"""

from __future__ import annotations

import pytest
from tests.replay_helpers import Recorder, compressed, same_plans

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import JobView, Plan
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.ps_truth import ps_workload


def replay(workload: Workload, cluster: str, bulk: bool, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[list[Plan], int, int, int]:
    """Every plan; decisions that kept jobs in bulk, of them those that gave some back; one-by-one assigns."""
    policy = Optimus()
    policy.held_in_bulk = bulk
    counts = [0, 0, 0]
    bulk_path, one = Workspace.assign_held, Workspace.assign

    def counted_bulk(self: Workspace, jobs: list[JobView]) -> bool:
        done = bulk_path(self, jobs)
        counts[0] += done and bool(jobs)
        counts[2] += done and len(jobs) < len(self.snap.held or ())
        return done

    def counted_one(self: Workspace, job: JobView, alloc: object) -> None:
        counts[1] += 1
        one(self, job, alloc)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(Workspace, "assign_held", counted_bulk)
        patch.setattr(Workspace, "assign", counted_one)
        recorder = Recorder(policy.cycle)
        recorder.uses_models = True  # (the preset's: the controller fits models online from reports)
        engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
        Controller(engine, recorder).run()
    return recorder.plans, counts[0], counts[1], counts[2]


def workload(name: str) -> Workload:
    if name == "line":  # a long line at minimum sizes (no targets: no model predicts), ten times faster
        return compressed(load_workload("synthetic:300:20", max_factor=2.0, seed=11, oracle=True))
    return ps_workload(40, rate_per_hour=40, seed=3)  # loss targets: models predict, jobs grow and shrink


@pytest.mark.parametrize(("name", "cluster"), [("line", "4x4"), ("sized", "3x4")])
def test_running_jobs_kept_in_bulk_plan_as_one_by_one(name: str, cluster: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fast, in_bulk, fast_one, given_back = replay(workload(name), cluster, True, monkeypatch)
    slow, not_bulk, slow_one, _ = replay(workload(name), cluster, False, monkeypatch)
    same_plans(fast, slow)
    assert not_bulk == 0 < in_bulk  # the bulk path served
    assert fast_one < slow_one / 2  # and spared most one-by-one assigns
    if name == "sized":  # running jobs left out of the bulk (resized or preempted) are given back first
        assert given_back > 0
