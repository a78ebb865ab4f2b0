"""Session 15 (busy15): the busy decision's fast paths plan exactly as their references.

Each switch is turned on and off around the same decisions: the decision bench's busy snapshot (a full
cluster, a line longer than the victims make room for) decided twice by one policy, and a small contended
replay (synthetic:300:60 on 4x4: preemption, a line, jobs coming and going). Every plan equal, allocations and
waits in the same order (`same_plans`), and the fast path seen to serve (its counter).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from bench.decision_time import snapshot
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import las
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.las import LasPreempt
from trainmaster.policies.preemption import VictimRule, _claimant_key
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.srtf import KeptRemaining
from trainmaster.policies.workspace import Workspace, minimum
from trainmaster.workloads.loaders import load_workload


def _las_hook(cycle: Cycle) -> LasPreempt:
    (hook,) = [h for h in cycle.after if isinstance(h, LasPreempt)]
    return hook


def _busy(cycle: Cycle) -> list[Plan]:
    snap = snapshot(busy=True, pending=3000)
    return [cycle.decide(snap), cycle.decide(snap)]


def _replay(cycle: Cycle) -> list[Plan]:
    recorder = Recorder(cycle)
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans


@pytest.mark.parametrize("run", [_busy, _replay], ids=["busy", "replay"])
def test_kept_las_keys_plan_as_looking_each_up(run: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """`LasPreempt.kept_keys`: the LAS pass's claimant keys kept per view (numbered) and handed over by
    position, the exhausted rest left blocked in runs; off: `las_preempt`, a key looked up per claimant."""
    plans: dict[bool, list[Plan]] = {}
    keyed: dict[bool, int] = {}
    preempt_with = las.preempt_with
    kinds: dict[bool, int] = {True: 0, False: 0}  # the most distinct keys in one pass

    def checked(snap: Snapshot, blocked: list[Any], ws: Workspace, rule: VictimRule,
                given: list[Hashable | None] | None = None) -> list[Any]:
        """Each given key against `_claimant_key` at the pass's start: None where it says None, and numbers
        that stand for its tuples one to one within the pass."""
        if given is not None:
            mixed = ws.memo.traits.mixed
            to_tuple: dict[Hashable, Hashable] = {}  # a kept number -> the `gang_key` tuple it stands for
            to_key: dict[Hashable, Hashable] = {}
            for job, key in zip(rule.claimants(blocked), given, strict=True):
                found = _claimant_key(job, ws.want, {}, ws.allocations, ws.rejected, mixed)
                assert (key is None) == (found is None)
                if key is not None:
                    assert isinstance(key, int) and key > 0
                    assert to_tuple.setdefault(key, found) == found and to_key.setdefault(found, key) == key
            kinds[LasPreempt.kept_keys] = max(kinds[LasPreempt.kept_keys], len(to_key))
        return preempt_with(snap, blocked, ws, rule, given)

    for on in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(las, "preempt_with", checked)
            patch.setattr(LasPreempt, "kept_keys", on)
            cycle = make_policy("trainmaster")
            assert isinstance(cycle, Cycle)
            plans[on] = run(cycle)  # type: ignore[operator]
            keyed[on] = _las_hook(cycle).keyed
    same_plans(plans[True], plans[False], least=1)
    assert keyed[False] == 0 and keyed[True] > (4000 if run is _busy else 200)
    assert kinds[True] >= 2 and kinds[False] == 0  # several gangs on one line, told apart
    assert any("preempted" in text for p in plans[True] for text in p.reasons.values())


def test_kept_las_keys_follow_the_workspace_and_the_size() -> None:
    """No key for a job whose view holds tasks, one held or rejected in this workspace, or one without a size;
    a new size object for the same view is keyed afresh (the replays never meet these: direct)."""
    snap = snapshot(busy=True, pending=20)
    ws = Workspace(snap)
    first, second, third, fourth = (snap.jobs[jid] for jid in snap.pending_ids[:4])  # type: ignore[index]
    running = next(job for job in snap.jobs.values() if job.active)
    ws.release(running)  # (its view still holds tasks)
    ws.want = {job.id: minimum(job.spec) for job in (first, second, third, running)}
    hook = LasPreempt()
    claimants = [first, second, third, running, fourth]
    keys = hook._keys(claimants, ws)
    assert all(isinstance(key, int) for key in keys[:3]) and keys[3:] == [None, None]
    assert ws.place(first, ws.want[first.id]) is not None  # held here now
    ws.rejected[second.id] = "never fits"
    again = hook._keys(claimants, ws)
    assert again[:2] == [None, None] and again[2] == keys[2]
    ((role, n),) = ws.want[third.id].items()
    ws.want[third.id] = {role: n + 1}
    grown = hook._keys(claimants, ws)[2]
    assert grown != keys[2] and grown == hook.memo.key(third.spec, {role: n + 1}, ws.memo.traits.mixed)


@pytest.mark.parametrize("run", [_busy, _replay], ids=["busy", "replay"])
def test_kept_remaining_keys_order_as_sorting(run: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """`KeptRemaining.kept`: srtf's order keys of jobs holding nothing kept per view; off: `by_remaining`."""
    plans: dict[bool, list[Plan]] = {}
    served: dict[bool, int] = {}
    for on in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(KeptRemaining, "kept", on)
            cycle = make_policy("srtf")
            assert isinstance(cycle, Cycle) and isinstance(cycle.order, KeptRemaining)
            plans[on] = run(cycle)  # type: ignore[operator]
            served[on] = cycle.order.served
    same_plans(plans[True], plans[False], least=1)
    assert served[False] == 0 and served[True] > (2500 if run is _busy else 1000)
    assert any("preempted" in text for p in plans[True] for text in p.reasons.values())
