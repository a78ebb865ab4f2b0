"""Session 13's long-line steps plan exactly as their references.

`BlockedLine.line_keys`: the place phase leaves its blocked jobs (in rank order) and the gang key it found for
each (`Workspace.blocked_line`); preemption takes them as its claimants and keys instead of checking their
order and reading every key again. `Tiresias.misfit_prefix`: the pending pass gives up when the first pending
jobs' minimums together do not fit, before summing every pending job's. Each replays a contended workload (a
long line, preemption, migration) with both switches on and both off: every plan equal, its allocations and waits in
the same order, and the fast path seen taken; the line's keys are checked against `_keys` at every decision.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import preemption
from trainmaster.policies.cycle import BlockedLine, Cycle
from trainmaster.policies.pending import PendingDemand
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.tiresias import Tiresias
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload


def _replay(policy: Cycle) -> list[Plan]:
    recorder = Recorder(policy)
    workload = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # (under a second)
    Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_long_line_steps_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both switches on against both off (each step is exact on its own; two runs per preset, not four, keep
    the test under its CPU budget): same plans, and each fast path seen taken."""
    def run(on: bool) -> tuple[list[Plan], dict[str, int]]:
        seen = {"lined": 0, "keys": 0, "sums": 0}
        preempt_with, keys, of = preemption.preempt_with, preemption._keys, PendingDemand.of

        def checked(snap: Snapshot, blocked: list[Any], ws: Workspace, rule: VictimRule) -> list[Any]:
            line = ws.blocked_line
            if line is not None and line[0] is blocked:
                seen["lined"] += 1  # every key as `_keys` reads it, before any claimant is served
                assert line[1] == keys(blocked, ws.want, ws.gangs, ws.allocations, ws.rejected,
                                       ws.memo.traits.mixed)
            return preempt_with(snap, blocked, ws, rule)

        def counted(*args: Any) -> Any:
            seen["keys"] += 1
            return keys(*args)

        def summed(self: PendingDemand, snap: Snapshot, pending: Any) -> Any:
            seen["sums"] += 1
            return of(self, snap, pending)

        with monkeypatch.context() as patch:
            patch.setattr(BlockedLine, "line_keys", on)
            patch.setattr(Tiresias, "misfit_prefix", 16 if on else 0)  # (0: the first pending job alone)
            patch.setattr(preemption, "preempt_with", checked)
            patch.setattr(preemption, "_keys", counted)
            patch.setattr(PendingDemand, "of", summed)
            patch.setattr(VictimRule, "skip_runs_from", 0)  # (short lines: every exhausted rest taken in runs)
            policy = make_policy(preset)
            assert isinstance(policy, Cycle)
            return _replay(policy), seen

    fast, fast_seen = run(True)
    slow, slow_seen = run(False)
    same_plans(fast, slow, least=100)
    assert fast_seen["lined"] > 50 and slow_seen["lined"] == 0  # the place phase's line served preemption
    assert slow_seen["keys"] > 0 == fast_seen["keys"]  # ... and its keys to the rest of a pass, not `_keys`
    if preset == "tiresias":
        assert fast_seen["sums"] < 0.2 * slow_seen["sums"]  # the prefix spared sums the first job alone did not
