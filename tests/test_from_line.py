"""The line fast paths (`Cycle.from_line`: fifo's head of line, drf's fill by shape) plan exactly as the phases.

Each preset replays a contended workload twice, once as registered and once with
`from_line` off, recording every plan; the two sequences must be equal, waits in
the same order. The engine is deterministic, so any difference is the fast path's.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.replay_helpers import Recorder

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload


def replay(workload: Workload, preset: str, fast: bool, queues: dict[str, QueueSpec] | None = None,
           cluster: str = "4x4") -> list[Plan]:
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle) and cycle.from_line is not None
    if not fast:
        cycle.from_line = None
    recorder = Recorder(cycle)
    Controller(SimEngine(parse_shorthand(cluster), workload, SimConfig()), recorder, queues=queues).run()
    return recorder.plans


def assert_same(fast: list[Plan], slow: list[Plan]) -> None:
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.waits) == list(b.waits)  # the order people (and recorded plans) see them in


def with_giant(workload: Workload) -> Workload:
    """One job no node of the cluster can ever hold: rejected, in both runs alike."""
    first = workload.jobs[3]
    giant = dataclasses.replace(first, job_id="giant", spec=dataclasses.replace(
        first.spec, name="giant", roles={r: dataclasses.replace(s, resources=Resources(gpu=64, cpu=1))
                                         for r, s in first.spec.roles.items()}))
    return dataclasses.replace(workload, jobs=(*workload.jobs[:3], giant, *workload.jobs[3:]))


@pytest.mark.parametrize("preset", ["fifo", "drf"])
def test_fixed_size_jobs_plan_alike(preset: str) -> None:
    workload = with_giant(load_workload("synthetic:400:60", max_factor=1.0, seed=3))
    fast = replay(workload, preset, True)
    assert sum(len(p.waits) for p in fast) > 2000  # contended: jobs waited through many decisions
    assert any(p.rejected for p in fast)
    assert_same(fast, replay(workload, preset, False))


@pytest.mark.parametrize("preset", ["fifo", "drf"])
def test_elastic_and_parameter_server_jobs_plan_alike(preset: str) -> None:
    """drf falls back to the phases for elastic jobs; fifo's line is unaffected by sizes."""
    workload = load_workload("ps:150:40", seed=1)
    assert_same(replay(workload, preset, True), replay(workload, preset, False))


def test_drf_with_queues_plans_alike() -> None:
    """Several queues: drf's fill by shape declines, the phases decide."""
    base = load_workload("synthetic:200:60", max_factor=1.0, seed=5)
    names = ["a", "b"]
    jobs = tuple(dataclasses.replace(j, spec=dataclasses.replace(j.spec, queue=names[i % 2]))
                 for i, j in enumerate(base.jobs))
    workload = dataclasses.replace(base, jobs=jobs)
    queues = {n: QueueSpec(n, weight=1.0 + i) for i, n in enumerate(names)}
    assert_same(replay(workload, "drf", True, queues), replay(workload, "drf", False, queues))
