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
from tests.replay_helpers import Before, on_and_off, preset_plans

from trainmaster.policies import preemption
from trainmaster.policies.cycle import BlockedLine
from trainmaster.policies.pending import PendingDemand
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.snapshot import Snapshot
from trainmaster.policies.tiresias import Tiresias
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_long_line_steps_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both switches on against both off (each step is exact on its own; two runs per preset, not four, keep
    the test under its CPU budget): same plans, and each fast path seen taken."""
    keys = preemption._keys  # (the check's own reads are not counted)

    def lined(snap: Snapshot, blocked: list[Any], ws: Workspace, rule: VictimRule) -> bool:
        """Whether the place phase's line served this pass; its keys checked against `_keys`' (before any
        claimant is served)."""
        line = ws.blocked_line
        if line is None or line[0] is not blocked:
            return False
        assert line[1] == keys(blocked, ws.want, ws.gangs, ws.allocations, ws.rejected, ws.memo.traits.mixed)
        return True

    # (The cut, tir26, leaves no `Workspace.gangs` entry for the rest it reads off the order's line, so `_keys`
    # would key those jobs afresh, as tuples: off here; its keys are checked against a walk in test_tir26_*.)
    monkeypatch.setattr(BlockedLine, "cut", False)
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (BlockedLine, "line_keys"),
                            (Tiresias, "misfit_prefix", 16, 0),  # (0: the first pending job alone)
                            (VictimRule, "skip_runs_from", 0, 0),  # (short lines: every exhausted rest in runs)
                            spies={"lined": (preemption, "preempt_with", Before(lined)),
                                   "keys": (preemption, "_keys"), "sums": (PendingDemand, "of")}, least=100)
    assert sum(fast.calls["lined"]) > 50 and not any(slow.calls["lined"])  # the line served preemption
    assert slow.calls["keys"] and not fast.calls["keys"]  # ... and its keys to the rest of a pass, not `_keys`
    if preset == "tiresias":  # the prefix spared sums the first job alone did not
        assert len(fast.calls["sums"]) < 0.2 * len(slow.calls["sums"])
