"""optimus' misfit tail kept as one block of the line (`Optimus.kept_tail`), everywhere it is read.

The plan's waits and reasons are `snapshot.Lined` maps over the block (`Tail.lined`, `Workspace.segment`), and
the controller compares only the jobs a plan lists as changed since the last plan (`Lined.changed`). Each test
replays optimus as the controller drives it (`Optimus.decide`) with the block and with every wait written per
job (the switch off: `_fused_tail`'s update), comparing every plan, its waits and reasons in order, the waits
shared alike, and every record's log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import compressed, same_plans, spy
from tests.test_drf_turns import PERTURB
from tests.test_model_groups import _philly
from tests.test_optimus_misfit_tail import workload

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.controller.why import explain_pending
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Event
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Lined, Plan, Snapshot
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

Logs = dict[str, tuple[str, list[tuple[float, str]]]]


class _Kept:
    """The optimus preset as the controller drives it, keeping every plan and its waits as read at once."""

    def __init__(self) -> None:
        self.optimus = Optimus()
        self.name, self.interval, self.uses_models = "optimus", self.optimus.interval, True
        self.reads_few_jobs = self.optimus.reads_few_jobs
        self.plans: list[Plan] = []
        self.at_once: list[list[str]] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.optimus.decide(snapshot)
        self.plans.append(plan)
        self.at_once.append(list(plan.waits))  # (the block read off the line while it is unchanged)
        return plan


class _Run:
    """One replay: the plans, every record's log, per decision whether the controller compared only what the
    plan listed as changed, and each `_kept_tail` answer."""

    def __init__(self, kept: _Kept, logs: Logs, chained: list[bool], tails: list[bool | None]) -> None:
        self.kept, self.logs, self.chained, self.tails = kept, logs, chained, tails


def _replay(jobs: Workload, cluster: str, on: bool, monkeypatch: pytest.MonkeyPatch,
            perturb: Callable[[Controller], None] | None = None) -> _Run:
    with monkeypatch.context() as patch:
        patch.setattr(Optimus, "kept_tail", on)
        tails = spy(patch, Optimus, "_kept_tail")
        kept = _Kept()
        engine = SimEngine(parse_shorthand(cluster), jobs, SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
        controller = Controller(engine, kept)
        if perturb is not None:
            perturb(controller)
        chained: list[bool] = []
        seen: list[object] = [None]

        def watch(snap: object, plan: Plan) -> None:
            reasons = plan.reasons
            chained.append(isinstance(reasons, Lined) and reasons.changed is not None and reasons.base == seen[0])
            seen[0] = reasons.stamp if isinstance(reasons, Lined) else None

        controller.after_cycle.append(watch)
        controller.run()
        logs = {jid: (r.why, list(r.decisions)) for jid, r in controller.jobs.items()}
        return _Run(kept, logs, chained, list(tails))


def asking(controller: Controller, every: int) -> None:
    """Every `every`-th wait, a person asks `why` of every pending job (`explain_pending`, as the daemon does): a
    snapshot taken between decisions (its journal is lost to the next one) and the last plan read per job."""
    engine, calls = controller.engine, [0]
    wait = engine.wait

    def asking_wait(timeout: float | None) -> list[Event]:
        events = list(wait(timeout))
        calls[0] += 1
        if calls[0] % every == 0:
            explain_pending(controller)
        return events

    engine.wait = asking_wait  # type: ignore[method-assign]


def fragments() -> Workload:
    """A line where every third job is one 3-GPU task (it cannot be spread), the others one 1-GPU task: on 4x4
    such a job's minimum fits the free total, but often no node (fragmentation: a wait of its own after the
    tail's), and the tail's front moves back over it when a job ahead comes back in line."""
    line = load_workload("synthetic:200:20", max_factor=1.0, seed=11, oracle=True)
    return compressed(replace(line, jobs=tuple(
        replace(j, spec=replace(j.spec, roles={Role.WORKER: replace(j.spec.roles[Role.WORKER], min=1, max=1,
                                                                     resources=Resources(gpu=3 if k % 3 == 0 else 1))}))
        for k, j in enumerate(line.jobs))))


def _sharing(plan: Plan) -> list[int]:
    """Which earlier wait each of the plan's waits is (the same object), in order."""
    first: dict[int, int] = {}
    return [first.setdefault(id(w), k) for k, w in enumerate(plan.waits.values())]


def _alike(fast: _Run, slow: _Run) -> None:
    """Planned and noted alike: every plan (`same_plans`), its reasons in order, its waits shared alike and read
    at once in the same order, every record's log."""
    same_plans(fast.kept.plans, slow.kept.plans)
    for a, b in zip(fast.kept.plans, slow.kept.plans, strict=True):
        assert list(a.reasons.items()) == list(b.reasons.items())
        assert _sharing(a) == _sharing(b)
    assert fast.kept.at_once == slow.kept.at_once
    assert fast.logs == slow.logs


CASES: dict[str, Callable[[Controller], None] | None] = {**PERTURB, "asked": lambda c: asking(c, 3)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ["shapes", "fragments"])
def test_block_plans_and_notes_as_per_job_waits(name: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line of jobs with minimums of 1, 2 and 3 GPUs (each tail holds several waits), or of 1-GPU jobs and
    3-GPU ones that fragment, with jobs failing back into line and a node lost, pending specs changed, notes from
    elsewhere, `why` asked between decisions: the block plans and notes as the per-job waits; most tails were
    kept as blocks, and most of those decisions compared only what changed."""
    jobs = workload(name) if name == "shapes" else fragments()
    fast = _replay(jobs, "4x4", True, monkeypatch, CASES[case])
    slow = _replay(jobs, "4x4", False, monkeypatch, CASES[case])
    _alike(fast, slow)
    assert not slow.tails  # (the reference writes every wait)
    assert fast.tails.count(True) > 30
    lined = {id(p) for p in fast.kept.plans if isinstance(p.reasons, Lined)}  # (a quiet tick: the last plan again)
    assert len(lined) == fast.tails.count(True)
    assert sum(fast.chained) > (10 if case == "asked" else len(lined) // 2)  # (a snapshot between: no base)
    assert sum(len(log) for _, log in fast.logs.values()) > 3 * len(fast.logs)  # reasons changed while waiting


@pytest.mark.parametrize("case", ["plain", "asked"])
def test_a_minimum_that_joins_the_tail_and_fits(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first jobs ask for 3 GPUs, the later ones 1: a 1-GPU job that joins the tail may still fit, found by
    the block's own check (its shape worked out, `_floor` fell): one by one from there, as the reference; also
    with `why` asked between decisions (the jobs that joined meanwhile are in no journal: no block then)."""
    jobs = workload("mixed")
    fast = _replay(jobs, "4x4", True, monkeypatch, CASES[case])
    slow = _replay(jobs, "4x4", False, monkeypatch, CASES[case])
    _alike(fast, slow)
    assert False in fast.tails and fast.tails.count(True) > 30


def test_philly_line_kept_as_a_block(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Philly's first jobs on 4x8 (every job at its minimum, a long line; quiet ticks answered with the last
    plan, `skip_unmoved`): the same plans and logs; the tails kept, their decisions chained."""
    jobs = _philly(shared_data)
    fast = _replay(jobs, "4x8", True, monkeypatch)
    slow = _replay(jobs, "4x8", False, monkeypatch)
    _alike(fast, slow)
    assert fast.tails.count(True) > 20 and sum(fast.chained) > 20


@pytest.mark.parametrize(("name", "case"), [("shapes", "failures"), ("fragments", "failures"), ("shapes", "asked")])
def test_changed_lists_every_job_whose_reason_moved(name: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each plan's `changed` holds every waiting job whose reason differs from the previous plan's (or that did
    not wait then), with its reason; read per job before the full maps exist, and in full after the run (from
    the views: the line has moved on), the maps answer as the per-job dicts of the reference run."""
    jobs = workload(name) if name == "shapes" else fragments()
    fast = _replay(jobs, "4x4", True, monkeypatch, CASES[case])
    slow = _replay(jobs, "4x4", False, monkeypatch, CASES[case])
    previous: dict[str, str] = {}
    checked = 0
    for plan, ref in zip(fast.kept.plans, slow.kept.plans, strict=True):
        reasons, waits = plan.reasons, plan.waits
        if isinstance(reasons, Lined) and reasons._full is None:
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
    assert checked > 10
