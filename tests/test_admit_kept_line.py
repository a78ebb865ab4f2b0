"""`Cycle.admit` from the pending line kept across decisions (`Cycle.kept_line`) admits exactly as the reference.

The reference sorts every job by submit time and asks each pending job's never-fits verdict, every decision;
the kept line follows the snapshot's pending journal, merges the few others (running jobs) into its order and
keeps the verdicts. Presets in submit order (optimus, fifo's fallback) and in their own order (tiresias,
trainmaster) replay a contended line where some jobs can never fit, with and without it: every plan, the
order of its allocations, its waits and its rejections must be equal.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.replay_helpers import Recorder

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload


def replay(preset: str, kept: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Plan], int]:
    """Every plan, and how many decisions admitted from the kept line."""
    served = [0]
    fast = Cycle._admit_from_line

    def counted(self: Cycle, snap: Snapshot, ws: Workspace) -> list[object]:
        served[0] += 1
        return fast(self, snap, ws)  # type: ignore[return-value]

    with monkeypatch.context() as patch:
        patch.setattr(Cycle, "kept_line", kept)
        patch.setattr(Cycle, "_admit_from_line", counted)
        policy = make_policy(preset)
        cycle = policy if isinstance(policy, Cycle) else policy.cycle  # type: ignore[attr-defined]
        recorder = Recorder(cycle)
        recorder.uses_models = policy.uses_models
        workload = load_workload("synthetic:120:20", max_factor=2.0, seed=5, oracle=True)
        workload = replace(workload, jobs=tuple(  # every seventh job asks for a GPU type 2x4 lacks: never fits
            replace(j, spec=replace(j.spec, require_gpu_types=("a100",))) if k % 7 == 3 else j
            for k, j in enumerate(workload.jobs)))
        config = SimConfig(report_interval=LEARNING_REPORT_INTERVAL if policy.uses_models else None)
        Controller(SimEngine(parse_shorthand("2x4"), workload, config), recorder).run()
    return recorder.plans, served[0]


@pytest.mark.parametrize("preset", ["optimus", "tiresias", "trainmaster"])
def test_kept_line_admits_as_the_reference(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, served = replay(preset, True, monkeypatch)
    slow, none = replay(preset, False, monkeypatch)
    assert len(fast) == len(slow) > 50
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.allocations) == list(b.allocations)  # (the order the controller's actions follow)
        assert list(a.waits) == list(b.waits)
        assert list(a.rejected) == list(b.rejected)
    assert none == 0 < served
    assert any(plan.rejected for plan in fast)  # jobs that can never fit on 2x4 were rejected
