"""Session 14: gang keys kept as numbers (`KeptGangs.numbered`) plan exactly as the key tuples.

The place phase's kept keys, its blocked line and preemption's `lost`/`misfits` lookups over it use the
number `KeptGangs` gave each key tuple instead of the tuple. Each preset replays a contended workload (a long
line, preemption, migration) with the numbers and with the tuples: every plan equal, its allocations and waits in
the same order; with the numbers on, every key on the line is an int, equal numbers stand for equal tuples and
unequal ones for unequal tuples (checked against `gang_key` at every preemption pass), and no key is falsy.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from tests.replay_helpers import Before, Recorder, on_and_off, preset_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import preemption
from trainmaster.policies.cycle import Cycle, KeptGangs, gang_key
from trainmaster.policies.objectives import apply_objectives
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_numbered_keys_plan_as_tuples(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def lined(snap: Snapshot, blocked: list[Any], ws: Workspace, rule: VictimRule) -> tuple[int, int] | None:
        """A line the place phase left for preemption: its keys checked; how many, and how many gangs."""
        line = ws.blocked_line
        if line is None or line[0] is not blocked:
            return None
        to_tuple: dict[Hashable, Hashable] = {}
        to_key: dict[Hashable, Hashable] = {}
        keys = 0
        for job, key in zip(*line, strict=True):
            if key is not None:
                keys += 1
                assert isinstance(key, int) is KeptGangs.numbered and bool(key)
                found = gang_key(job.spec, ws.want[job.id], ws.memo.traits.mixed)
                assert found is not None
                assert to_tuple.setdefault(key, found) == found  # equal numbers: equal tuples
                assert to_key.setdefault(found, key) == key  # equal tuples: equal numbers
        return keys, len(to_key)

    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (KeptGangs, "numbered"),
                            (VictimRule, "skip_runs_from", 0, 0),  # (short lines: every exhausted rest in runs)
                            spies={"lines": (preemption, "preempt_with", Before(lined))}, least=100)
    lines = [seen for seen in fast.calls["lines"] if seen is not None]
    assert len(lines) > 50 and sum(keys for keys, _ in lines) > 500  # the numbers served the line and preemption
    assert max(kinds for _, kinds in lines) >= 3  # several gangs blocked at once: numbers told apart, not one for all
    assert slow.calls["lines"] == fast.calls["lines"]  # (the same lines, keyed by tuples)


def test_objectives_without_models_leave_sizes() -> None:
    """No job has a model (presets that do not learn): the sizes come back as they were, the very dict."""
    workload = load_workload("synthetic:20:5", max_factor=1.0, seed=3, oracle=True)
    snaps: list[Snapshot] = []
    policy = make_policy("tiresias")
    assert isinstance(policy, Cycle)

    class Keep(Recorder):
        def decide(self, snapshot: Snapshot) -> Plan:
            snaps.append(snapshot)
            return super().decide(snapshot)

    Controller(SimEngine(parse_shorthand("2x4"), workload, SimConfig()), Keep(policy)).run()
    snap = snaps[len(snaps) // 2]
    assert not snap.models and snap.jobs
    ws = Workspace(snap)
    jobs = list(snap.jobs.values())
    sizes = {job.id: {role: s.min for role, s in job.spec.roles.items()} for job in jobs}
    copy = {jid: dict(want) for jid, want in sizes.items()}
    assert apply_objectives(snap, jobs, sizes, ws) is sizes and sizes == copy and not ws.notes
