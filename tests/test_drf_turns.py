"""drf's failed turns as pieces of the line (`policies.turns`), everywhere they are read.

The plan's waits and reasons are `snapshot.Lined` maps, and the controller
compares only the jobs a plan says changed (`Lined.changed`) plus those noted
from elsewhere (`notes.Said`): each test replays with the pieces and with every
wait written per job (`fill_by_shape(lined=False)`), comparing every plan, the
waits in order, and every record's log.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from tests import replay_helpers
from tests.test_line_tail import Recorder, failing, resizing

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Event
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.drf import fill_by_shape
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Lined
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

Logs = dict[str, tuple[str, list[tuple[float, str]]]]


def replay(workload: Workload, lined: bool, perturb: Callable[[Controller], None] | None = None,
           read_every: bool = False, at_once: bool = True) -> tuple[replay_helpers.Recorder, Logs, list[bool]]:
    """drf on 4x4, with its waits as pieces (`lined`) or per job; the plans, every record's log, and per
    decision whether the controller compared only the jobs the plan listed as changed."""
    cycle = make_policy("drf")
    assert isinstance(cycle, Cycle)
    cycle.from_line = partial(fill_by_shape, lined=lined)
    recorder = Recorder(cycle) if at_once else replay_helpers.Recorder(cycle)
    controller = Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder)
    if perturb is not None:
        perturb(controller)
    chained: list[bool] = []
    seen: list[object] = [None]

    def watch(snap: object, plan: object) -> None:
        reasons = getattr(plan, "reasons", None)
        chained.append(isinstance(reasons, Lined) and reasons.changed is not None and reasons.base == seen[0])
        seen[0] = reasons.stamp if isinstance(reasons, Lined) else None

    controller.after_cycle.append(watch)
    if read_every:  # every record settled out of its stream after every decision
        controller.after_cycle.append(lambda snap, plan: [r.decisions for r in controller.jobs.values()])
    controller.run()
    return recorder, {jid: (r.why, list(r.decisions)) for jid, r in controller.jobs.items()}, chained


def noting(controller: Controller, every: int) -> None:
    """Every `every`-th wait notes something on the latest pending job's record from outside a decision (as
    the daemon does): the next decision must note its reason again though the plan says it did not change."""
    engine, calls = controller.engine, [0]
    wait = engine.wait

    def noting_wait(timeout: float | None) -> list[Event]:
        events = list(wait(timeout))
        calls[0] += 1
        pending = [r for r in controller.live.values() if r.state is JobState.PENDING]
        if calls[0] % every == 0 and pending:
            pending[-1].note(controller.clock.now(), "looked at by a person")
        return events

    engine.wait = noting_wait  # type: ignore[method-assign]


PERTURB: dict[str, Callable[[Controller], None] | None] = {
    "plain": None,
    "failures": lambda c: failing(c, 9),  # jobs go back in line at their old place; a node is lost once
    "spec-changes": lambda c: resizing(c, 7),  # pending jobs change shape mid-run
    "notes-from-elsewhere": lambda c: noting(c, 5),
}


@pytest.mark.parametrize("case", list(PERTURB))
def test_pieces_plan_and_note_as_per_job_waits(case: str) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=21)
    fast, fast_logs, chained = replay(workload, True, PERTURB[case])
    slow, slow_logs, _ = replay(workload, False, PERTURB[case])
    lined = [p for p in fast.plans if isinstance(p.waits, Lined)]
    assert len(lined) > 200 and sum(len(p.waits) > 20 for p in lined) > 50  # contended: long waiting lines
    assert sum(chained) > len(chained) // 2  # most decisions compared only what changed
    assert fast.plans == slow.plans
    assert isinstance(fast, Recorder) and isinstance(slow, Recorder)
    assert fast.at_once == slow.at_once == [list(p.waits) for p in slow.plans]  # read at once, in order
    assert [list(p.waits) for p in fast.plans] == [list(p.waits) for p in slow.plans]  # read after the run
    assert [list(p.reasons.items()) for p in fast.plans] == [list(p.reasons.items()) for p in slow.plans]
    assert fast_logs == slow_logs
    assert sum(len(log) for _, log in fast_logs.values()) > 3 * len(fast_logs)  # reasons changed while waiting
    _, read_logs, _ = replay(workload, True, PERTURB[case], read_every=True)
    assert read_logs == slow_logs


def test_changed_lists_every_job_whose_reason_moved() -> None:
    """Each plan's `changed` holds every waiting job whose reason differs from the previous plan's (or that
    did not wait then), with its reason; read per job and in full after the run (from the views: the line
    has moved on), the maps answer as the per-job dicts of the reference run."""
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=22)
    fast, _, _ = replay(workload, True, PERTURB["failures"], at_once=False)
    slow, _, _ = replay(workload, False, PERTURB["failures"], at_once=False)
    previous: dict[str, str] = {}
    checked = 0
    for plan, ref in zip(fast.plans, slow.plans, strict=True):
        reasons, waits = plan.reasons, plan.waits
        if isinstance(reasons, Lined):
            assert isinstance(waits, Lined) and len(reasons) == len(ref.reasons) == len(waits)
            for jid in [*ref.reasons, *plan.allocations, "nope"]:  # per job (before the full dicts exist)
                assert reasons.get(jid) == ref.reasons.get(jid) and waits.get(jid) == ref.waits.get(jid)
        now = dict(reasons)
        assert list(now.items()) == list(ref.reasons.items()) and list(waits.items()) == list(ref.waits.items())
        if isinstance(reasons, Lined) and reasons.changed is not None:
            moved = {jid: text for jid, text in now.items() if previous.get(jid) != text}
            assert moved.items() <= reasons.changed.items()
            assert all(now[jid] == text for jid, text in reasons.changed.items())
            checked += bool(moved)
        previous = now
    assert checked > 50
