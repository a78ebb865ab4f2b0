"""`fair_place`'s shortcuts plan exactly as the full per-job path.

A pending one-role gang that does not fit in the free total takes the wait an earlier gang of the same task
shape and count got with that very free total (nothing placed or released since), without its demand, test
and key; strict, without queue definitions, the jobs behind the head are blocked in one update. edl (greedy:
every later job is tried) and trainmaster (strict) replay contended workloads with and without them, edl also
with queue definitions (then both are off: quotas can reject a job); every plan and its waits must be equal.
"""

from __future__ import annotations

import pytest
from bench.record_plans import QUEUES, queued
from tests.replay_helpers import Recorder

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import fairshare
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

STRICT = {"edl": False, "trainmaster": True}  # as `trainmaster.build` sets it (greedy backfill: not strict)


def replay(workload: Workload, preset: str, shortcuts: bool, monkeypatch: pytest.MonkeyPatch,
           queues: dict[str, QueueSpec] | None = None) -> tuple[list[Plan], int, int]:
    """Every plan, how many demands the place phase computed, and how many jobs it blocked one at a time
    behind a head."""
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle)
    cycle.place = fairshare.fair_place(STRICT[preset], shortcuts=shortcuts)
    demands, behind = [0], [0]
    full, one = fairshare.demand, Workspace.block_behind

    def counted(*args: object) -> object:
        demands[0] += 1
        return full(*args)  # type: ignore[arg-type]

    def counted_behind(self: Workspace, job_id: str, head_id: str) -> None:
        behind[0] += 1
        one(self, job_id, head_id)

    with monkeypatch.context() as patch:
        patch.setattr(fairshare, "demand", counted)
        patch.setattr(Workspace, "block_behind", counted_behind)
        recorder = Recorder(cycle)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder, queues=queues).run()
    return recorder.plans, demands[0], behind[0]


def assert_same(fast: list[Plan], slow: list[Plan]) -> None:
    assert len(fast) == len(slow) > 50
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.waits) == list(b.waits)
        assert [a.waits[j] for j in a.waits] == [b.waits[j] for j in b.waits]


@pytest.mark.parametrize("preset", ["edl", "trainmaster"])
def test_one_role_misfits_plan_like_the_full_path(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:400:30", max_factor=1.0, seed=7, oracle=True)
    fast, fast_demands, fast_behind = replay(workload, preset, True, monkeypatch)
    slow, slow_demands, slow_behind = replay(workload, preset, False, monkeypatch)
    assert_same(fast, slow)
    if preset == "edl":  # greedy: the line behind a misfit is tried, and the shortcut serves most of it
        assert fast_demands < slow_demands / 2
    else:  # strict: the line behind the head is blocked in one update
        assert fast_behind == 0 < slow_behind


def test_with_queue_definitions_plan_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    workload = queued(load_workload("synthetic:200:60", max_factor=1.0, seed=5, oracle=True))
    fast, _, _ = replay(workload, "edl", True, monkeypatch, QUEUES)
    slow, _, _ = replay(workload, "edl", False, monkeypatch, QUEUES)
    assert_same(fast, slow)
