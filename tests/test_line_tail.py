"""The jobs behind the head of a strict line as one segment, everywhere it is read.

`snapshot.Tail` (the plan's waits and reasons as `Behind` maps), the controller's
tail stream (`Controller._note_tail`) and the snapshots' frozen books
(`controller.views`) must read exactly as the per-job dicts and loops they
replace: each test replays with and without them, or against a plain dict.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping

import pytest
from tests import replay_helpers
from tests.replay_helpers import eager

from trainmaster.controller.loop import Controller
from trainmaster.controller.notes import NoteStreams, Settles
from trainmaster.controller.views import Book, Frozen
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Event, NodeLost, TaskFailed
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Behind, Plan, Snapshot, Tail
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

Logs = dict[str, tuple[str, list[tuple[float, str]]]]


def test_book_reads_as_a_dict_and_its_frozen_copies_as_the_dict_then() -> None:
    rng = random.Random(4)
    book: Book[int] = Book()
    plain: dict[str, int] = {}
    copies: list[tuple[Frozen[int], dict[str, int]]] = []
    for step in range(6000):
        key = f"j{rng.randrange(400)}"
        if rng.random() < 0.35 and key in plain:
            assert book.pop(key) == plain.pop(key)
        else:
            book[key] = plain[key] = step
        assert len(book) == len(plain) and (key in book) == (key in plain)
        if step % 37 == 0:
            copies.append((book.frozen(), dict(plain)))
        if step % 500 == 0:
            assert book.folded() == plain and list(book.folded()) == list(plain)
    assert book.as_dict() == plain and list(book.as_dict()) == list(plain) and book.keys() == list(plain)
    for frozen, then in copies:  # every copy reads as the dict did when it was taken, in its order
        assert list(frozen) == list(then) and list(frozen.items()) == list(then.items())
        assert len(frozen) == len(then) and frozen == then
        for key in ("j1", "j77", "j399", "nope"):
            assert frozen.get(key) == then.get(key) and (key in frozen) == (key in then)
        picked = rng.sample(list(then), min(9, len(then)))
        assert frozen.order(picked) == [k for k in then if k in set(picked)]
    assert book.pop("nope", -1) == -1
    with pytest.raises(KeyError):
        del book["nope"]


class Recorder(replay_helpers.Recorder):
    """Also keeps each plan's waits in order as read at once."""

    def __init__(self, cycle: Cycle) -> None:
        super().__init__(cycle)
        self.at_once: list[list[str]] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = super().decide(snapshot)
        self.at_once.append(list(plan.waits))  # the tail read from the line, while it is unchanged
        return plan


def failing(controller: Controller, every: int) -> None:
    """Every `every`-th wait also fails a running job (it backs off, then goes back in line at its old
    place: the head moves back) and, once, loses a node (the cluster changes: new never-fits verdicts)."""
    engine, calls = controller.engine, [0]
    wait = engine.wait

    def failing_wait(timeout: float | None) -> list[Event]:
        events = list(wait(timeout))
        calls[0] += 1
        running = [r.id for r in controller.live.values() if r.state is JobState.RUNNING]
        if calls[0] % every == 0 and running:
            events.append(TaskFailed(time=controller.clock.now(), job_id=running[0], message="injected"))
        if calls[0] == 5 * every:
            events.append(NodeLost(time=controller.clock.now(), node=controller.cluster.nodes[-1].name))
        return events

    engine.wait = failing_wait  # type: ignore[method-assign]


def eager_tail(self: Controller, tail: Tail, text: str, snap: Snapshot, own: Mapping[str, str], now: float) -> None:
    eager(self, dict.fromkeys(tail.members(), text), {}, now)


def replay(workload: Workload, how: str, monkeypatch: pytest.MonkeyPatch, every: int = 0,
           flags: list[bool] | None = None) -> Logs:
    with monkeypatch.context() as patch:
        if how == "eager":
            patch.setattr(Controller, "_note_reasons", eager)
            patch.setattr(Controller, "_note_tail", eager_tail)
        if flags is not None:
            follow = NoteStreams.follow_tail

            def counted(self: NoteStreams, reason: str, joining: Iterable[str], records: Mapping[str, Settles],
                        now: float, *, fresh: bool = False) -> None:
                flags.append(fresh)
                follow(self, reason, joining, records, now, fresh=fresh)

            patch.setattr(NoteStreams, "follow_tail", counted)
        controller = Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), make_policy("fifo"))
        if every:
            failing(controller, every)
        if how == "read-every-decision":
            controller.after_cycle.append(lambda snap, plan: [r.decisions for r in controller.jobs.values()])
        controller.run()
        return {jid: (r.why, list(r.decisions)) for jid, r in controller.jobs.items()}


@pytest.mark.parametrize("every", [0, 9])
def test_tail_notes_read_as_eager_ones(every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=11)
    fresh: list[bool] = []
    lazy = replay(workload, "lazy", monkeypatch, every, fresh)
    assert sum(len(log) for _, log in lazy.values()) > 3 * len(lazy)  # jobs waited behind several heads
    assert len(fresh) > 200 and sum(fresh) < len(fresh) // 10  # the tail stream moved on, rarely made anew
    assert replay(workload, "eager", monkeypatch, every) == lazy
    fresh.clear()  # every record read (settled out of the stream) after every decision: they join it again
    assert replay(workload, "read-every-decision", monkeypatch, every, fresh) == lazy
    assert len(fresh) > 200 and sum(fresh) < len(fresh) // 10
    if every:
        assert any("injected" in text for _, log in lazy.values() for _, text in log)


def with_and_without_line(preset: str, workload: Workload, perturb: Callable[[Controller], None]) -> list[Recorder]:
    """The preset replayed on 4x4 with its line's fast path and without it (`from_line = None`)."""
    runs = []
    for fast in (True, False):
        cycle = make_policy(preset)
        assert isinstance(cycle, Cycle)
        if not fast:
            cycle.from_line = None
        recorder = Recorder(cycle)
        controller = Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder)
        perturb(controller)
        controller.run()
        runs.append(recorder)
    return runs


@pytest.mark.parametrize("every", [0, 9])
def test_tail_reads_alike_from_the_line_and_from_the_views(every: int) -> None:
    """Read at once (from the line) and after the run (from the frozen views): the same waits, in order,
    and the plans equal those of the phases without the line's fast path."""
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=12)
    fast_run, slow_run = with_and_without_line("fifo", workload, lambda c: failing(c, every) if every else None)
    tails = [p for p in fast_run.plans if isinstance(p.waits, Behind)]
    assert len(tails) > 200 and any(len(p.waits) > 20 for p in tails)
    assert fast_run.plans == slow_run.plans
    assert fast_run.at_once == [list(p.waits) for p in fast_run.plans] == slow_run.at_once
    for plan in tails:  # the shared entries read per job, as the dicts they replace
        assert isinstance(plan.reasons, Behind)
        assert dict(plan.reasons) == {jid: plan.reasons[jid] for jid in plan.reasons}
        assert all(jid in plan.waits for jid in plan.reasons) and "nope" not in plan.waits


def resizing(controller: Controller, every: int) -> None:
    """Every `every`-th wait swaps the spec of the latest pending job for a smaller fixed-size one
    (`Controller.update`: the snapshot's journal lists it as changed)."""
    engine, calls = controller.engine, [0]
    wait = engine.wait

    def resizing_wait(timeout: float | None) -> list[Event]:
        events = list(wait(timeout))
        calls[0] += 1
        pending = sorted(jid for jid, r in controller.live.items() if r.state is JobState.PENDING)
        if calls[0] % every == 0 and pending:
            jid = pending[-1]
            spec = controller.live[jid].spec
            gpus = max(1, spec.min_gpus // 2)
            controller.update(jid, simple_job(spec.name, gpus, queue=spec.queue))
        return events

    engine.wait = resizing_wait  # type: ignore[method-assign]


def test_drf_shapes_follow_spec_changes_through_the_journal() -> None:
    """drf's shapes (`PendingLine.reshape`) checked only for the jobs the journal names: the plans stay
    those of the phases when pending jobs' specs change mid-run."""
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=13)
    fast_run, slow_run = with_and_without_line("drf", workload, lambda c: resizing(c, 7))
    line = fast_run.cycle.line
    assert line is not None and line.shaped
    runs = [fast_run.plans, slow_run.plans]
    assert len(runs[0]) > 200 and runs[0] == runs[1]
    assert [list(p.waits) for p in runs[0]] == [list(p.waits) for p in runs[1]]
