"""Quiet reports in bulk (`Controller.bulk_reports`, `SimEngine.wait_reports`): a time of progress reports alone is
handled inside the engine's wait, which goes on to the deadline the controller's next `step` would have set.

The invariant: with no parked job, no waker and nothing dirty, `step`'s timeout is the policy's interval (its
plan's `wake_after`, else `policy.interval`; None without live jobs), and a quiet report changes none of those,
so after a quiet time `t` the next wait's deadline is `t + interval` -- what the bulk wait sets itself. Each
replay below runs with the bulk path on and off: every decision's time, the jobs and models it saw, every plan,
every record (state, history, step, progress, decisions) and the engine's event count are equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from tests.replay_helpers import same_plans
from tests.test_learning_refresh import _seen
from tests.test_model_groups import _philly
from tests.test_once_per_snapshot import _ps

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.allocation import EMPTY
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Event, JobArrived, Report, progress_report
from trainmaster.core.job import simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

Setup = Callable[[Controller], None]


class Replay:
    """One replay's decisions (time, each job's state/step/speed, the models read), plans, records, steps."""

    def __init__(self, engine: SimEngine, preset: str, bulk: bool, interval: float | None = None,
                 setup: Setup | None = None) -> None:
        policy = make_policy(preset)
        self.seen: list[tuple[float, list[tuple[str, Any, int, float | None]], list[tuple[str, Any]]]] = []
        self.plans: list[Plan] = []
        seen, plans = self.seen, self.plans

        class Recording:
            name, uses_models, reads_few_jobs = policy.name, policy.uses_models, policy.reads_few_jobs

            def __init__(self) -> None:
                self.interval = policy.interval if interval is None else interval

            def decide(self, snap: Snapshot) -> Plan:
                jobs = [(jid, v.state, v.step, v.steps_per_s) for jid, v in snap.jobs.items()]
                seen.append((snap.now, jobs, [(jid, _seen(m)) for jid, m in snap.models.items()]))
                plans.append(policy.decide(snap))
                return plans[-1]

        self.controller = controller = Controller(engine, Recording())  # type: ignore[arg-type]
        controller.bulk_reports = bulk
        self.steps = 0
        step = controller.step

        def counted(max_wait: float | None = None) -> bool:
            self.steps += 1
            return step(max_wait)

        controller.step = counted  # type: ignore[method-assign]
        if setup is not None:
            setup(controller)
        controller.run()
        self.records = [(repr(r), r.decisions) for r in controller.jobs.values()]
        self.events = engine.events_processed
        self.now = engine.clock.now()


def _same(make: Callable[[], SimEngine], preset: str, least: int = 20, fewer: bool = True, **kwargs: Any
          ) -> tuple[Replay, Replay]:
    """The replay with the bulk path and without: the same decisions, plans, records and events; fewer steps
    (`fewer`; else as many: the bulk path never taken)."""
    fast, slow = Replay(make(), preset, True, **kwargs), Replay(make(), preset, False, **kwargs)
    assert [s[0] for s in fast.seen] == [s[0] for s in slow.seen]  # (each decision's time first: a clear diff)
    assert fast.seen == slow.seen
    same_plans(fast.plans, slow.plans, least=least)
    assert fast.records == slow.records
    assert (fast.events, fast.now) == (slow.events, slow.now)
    assert fast.steps < slow.steps if fewer else fast.steps == slow.steps
    return fast, slow


@pytest.mark.parametrize("preset", ["trainmaster", "optimus"])
def test_philly_replays_alike_with_quiet_reports_in_bulk(preset: str, shared_data: Path) -> None:
    """Philly's first jobs on 4x8, reports every 60 s (trainmaster ticks while elastic jobs run, optimus every
    60 s): decisions at the same times seeing the same jobs and models, the same plans and records."""
    workload = _philly(shared_data)
    fast, slow = _same(lambda: SimEngine(parse_shorthand("4x8"), workload, SimConfig(report_interval=60, seed=2)),
                       preset, least=40)
    assert fast.steps * 3 < slow.steps  # (most events are quiet reports)


def test_loss_targets_noise_and_two_gpu_types_replay_alike() -> None:
    """Parameter-server jobs with losses, noisy speeds and two GPU types (`test_once_per_snapshot`'s replay)."""
    _same(lambda: _ps("1x4:v100+1x4:k80"), "trainmaster", least=40)


def _line(n: int, every: float, duration: float, gpus: int = 1) -> Workload:
    """`n` one-type jobs arriving every `every` s, `duration` s each on `gpus` GPUs."""
    return Workload("line", tuple(WorkloadJob(f"j{i}", every * i, simple_job(f"j{i}", gpus),
                                              LinearTruth(duration, gpus)) for i in range(n)))


class Spying(SimEngine):
    """The engine, keeping the (time, kind) of every entry it fires."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fired: list[tuple[float, str]] = []

    def _fire(self, item: tuple[float, int, str, str, int]) -> list[Event]:
        self.fired.append((item[0], item[2]))
        return super()._fire(item)

    def _progress(self, key: str, now: float) -> Report:
        self.fired.append((now, "report"))
        return super()._progress(key, now)


@pytest.mark.parametrize("interval", [50.0, 100.0, 130.0])
def test_the_deadline_slides_from_each_quiet_report(interval: float) -> None:
    """Reports every 60 s under a policy interval of 50, 100, 130 s, a first start taking 250 s: a decision falls
    `interval` after the last event only where the events leave such a gap (50 s: after reports too; longer: only
    in the first start's silence)."""
    engines: list[Spying] = []

    def make() -> SimEngine:
        engines.append(Spying(parse_shorthand("1x8"), _line(3, 400.0, 1000.0),
                              SimConfig(report_interval=60.0, start_delay=250.0)))
        return engines[-1]

    fast, _ = _same(make, "optimus", least=5, interval=interval)
    fired = {t for t, _ in engines[0].fired}
    timed_out = [t for t, _, _ in fast.seen if t not in fired]
    assert timed_out
    after_report = [t for t in timed_out if t - interval in {t for t, k in engines[0].fired if k == "report"}]
    assert bool(after_report) == (interval < 60.0)


def test_a_report_at_an_arrivals_and_a_finishs_instant() -> None:
    """Arrivals every 120 s and reports every 60 s from starts at arrivals: reports share instants with arrivals
    and finishes (the engine fires them in one time: arrivals first, their entries being the oldest); handled in
    the reference's order."""
    engines: list[Spying] = []

    def make() -> SimEngine:
        engines.append(Spying(parse_shorthand("2x8"), _line(12, 120.0, 600.0, gpus=2), SimConfig(report_interval=60.0)))
        return engines[-1]

    _same(make, "trainmaster", least=10)
    kinds: dict[float, list[str]] = {}
    for t, kind in engines[0].fired:
        kinds.setdefault(t, []).append(kind)
    assert any({"report", "arrive"} <= set(k) for k in kinds.values())
    assert any({"report", "finish"} <= set(k) for k in kinds.values())


def test_wakers_parked_jobs_and_a_listener_that_asks_a_decision() -> None:
    """A waker (every 170 s), a job failing and parked for its backoff, and a listener that makes a decision due
    on some reports: the bulk wait steps aside (wakers, parked) or stops (dirty) as the reference decides."""
    def setup(controller: Controller) -> None:
        controller.wakers.append(lambda: (controller.clock.now() // 170.0 + 1) * 170.0 if controller.live else None)

    _same(lambda: SimEngine(parse_shorthand("1x8"), _line(6, 200.0, 900.0, gpus=2), SimConfig(report_interval=60.0)),
          "trainmaster", least=5, fewer=False, setup=setup)  # (with wakers the bulk wait is never taken)

    def failing(controller: Controller) -> None:
        def listen(what: str, record: JobRecord) -> None:
            if what == "running" and record.id == "j1" and not record.restarts:
                controller._task_failed("j1", controller.clock.now(), "crashed")  # parked for its backoff

        controller.backoff = (90.0, 300.0)
        controller.listeners.append(listen)

    fast, _ = _same(lambda: SimEngine(parse_shorthand("1x8"), _line(6, 200.0, 900.0, gpus=2),
                                      SimConfig(report_interval=60.0)), "trainmaster", least=5, setup=failing)
    assert fast.controller.jobs["j1"].restarts == 1

    def asking(controller: Controller) -> None:
        def listen(what: str, record: JobRecord) -> None:
            if what == "report" and record.step % 7 == 0:
                controller.update(record.id, replace(record.spec, priority=record.spec.priority + 1))

        controller.listeners.append(listen)

    _same(lambda: SimEngine(parse_shorthand("1x8"), _line(6, 200.0, 900.0, gpus=2), SimConfig(report_interval=60.0)),
          "trainmaster", least=5, setup=asking)


def test_wait_reports_hands_reports_in_order_and_returns_the_rest() -> None:
    """At one instant: reports before another event go to `on_report`; that event and what follows it are
    returned, in order; without `on_report` it is `wait`."""
    engine = SimEngine(parse_shorthand("1x8"), _line(1, 0.0, 1000.0), SimConfig(report_interval=60.0))
    controller = Controller(engine, make_policy("fifo"))
    controller.bulk_reports = False
    controller.step()  # arrival, start
    controller.step()  # running, its first report
    handed: list[Report] = []

    def on_report(report: Report) -> bool:
        if not handed:  # (the report at 120 s is in the heap now: after it at 120 s an arrival, then a report)
            engine._push(120.0, "arrive", "j0")
            engine._push(120.0, "report", "j0", engine._jobs["j0"].version)
        handed.append(report)
        return False

    got = engine.wait_reports(None, None, on_report)
    assert [r.time for r in handed] == [60.0, 120.0]
    assert [(type(e), e.time) for e in got] == [(JobArrived, 120.0), (Report, 120.0)]
    assert [(type(e), e.time) for e in engine.wait(None)] == [(Report, 180.0), (Report, 180.0)]
    assert [r.time for r in handed] == [60.0, 120.0]  # (none after the arrival at its instant, none by `wait`)


def test_an_engine_that_overrides_wait_sees_every_event() -> None:
    """A subclass that overrides `wait` (a recording engine) gets no bulk path: the controller calls its `wait`."""
    class Recording(SimEngine):
        def wait(self, timeout: float | None) -> list[Event]:
            return super().wait(timeout)

    plain = SimEngine(parse_shorthand("1x8"), _line(1, 0.0, 100.0), SimConfig(report_interval=60.0))
    recording = Recording(parse_shorthand("1x8"), _line(1, 0.0, 100.0), SimConfig(report_interval=60.0))
    assert plain.hands_reports and not recording.hands_reports
    reports: list[float] = []
    controller = Controller(recording, make_policy("fifo"))
    controller.report_sinks.append(lambda report, record: reports.append(report.time))
    controller.run()
    assert reports == [0.0, 60.0]  # every report came back through the subclass's `wait`


def test_a_wait_put_on_the_instance_after_the_controller_was_built_sees_every_event() -> None:
    """A test engine that wraps `wait` on the instance once the controller exists (fault injection) gets no bulk
    path from then on: the controller asks `hands_reports` at every step, not once."""
    engine = SimEngine(parse_shorthand("1x8"), _line(1, 0.0, 200.0), SimConfig(report_interval=60.0))
    controller = Controller(engine, make_policy("fifo"))
    assert engine.hands_reports
    seen: list[Event] = []
    wait = engine.wait

    def seeing(timeout: float | None) -> list[Event]:
        events = wait(timeout)
        seen.extend(events)
        return events

    engine.wait = seeing  # type: ignore[method-assign]
    assert not engine.hands_reports
    controller.run()
    assert [e.time for e in seen if isinstance(e, Report)] == [0.0, 60.0, 120.0, 180.0]


def test_progress_report_is_the_reports_init() -> None:
    """`progress_report` sets every field of `Report` (a field added to `Report` must be named there too)."""
    alloc = EMPTY
    fast = progress_report(3.0, "j", 7, 0.5, 2.0, alloc, 64, 1.5, 0.25)
    assert fast == Report(time=3.0, job_id="j", step=7, loss=0.5, steps_per_s=2.0, allocation=alloc, batch=64,
                          grad_sqr=1.5, grad_var=0.25)
    assert list(vars(fast)) == [f.name for f in fields(Report)]
    assert progress_report(1.0, "k", 2, None, None, None) == Report(1.0, "k", 2)
