"""Pieces the identity tests share: a policy that keeps every plan, the switch-on/off replay, the eager note loop.

Fast paths are proved by replaying with and without them: `on_and_off` replays with a switch on and off,
counts what the fast path (and the reference) called, and compares the plans (one copy of that harness).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Config, SpeedPredictor
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.live import LiveKinds
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.base import Workload


def same_plans(fast: Sequence[Plan], slow: Sequence[Plan], least: int = 50) -> None:
    """Two replays planned alike: more than `least` plans, each equal, its allocations (the order the
    controller's actions follow) and its waits in the same order."""
    assert len(fast) == len(slow) > least
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.allocations) == list(b.allocations)
        assert list(a.waits) == list(b.waits)
        assert [a.waits[j] for j in a.waits] == [b.waits[j] for j in b.waits]


Switch = tuple[Any, str] | tuple[Any, str, Any, Any]  # (owner, attribute[, fast value, reference value])


@dataclass
class Replayed:
    """One replay: its plans, and per spy what each call gave (its result, or what the spy's `keep` made)."""

    plans: list[Plan]
    calls: dict[str, list[Any]]


@dataclass(frozen=True)
class Before:
    """A spy's `keep` run on the arguments before the call: it sees what the callable is given, unchanged."""

    keep: Callable[..., Any]


Spy = tuple[Any, str] | tuple[Any, str, Callable[..., Any] | Before]  # (owner, attribute[, what to keep])


def spy(patch: pytest.MonkeyPatch, owner: Any, name: str, keep: Callable[..., Any] | Before | None = None
        ) -> list[Any]:
    """Wrap `owner.name` while `patch` holds: the list returned gets each call's result (`keep(result, *args)`
    when given, or `Before.keep(*args)`), so a test counts a path without a wrapper of its own."""
    real = getattr(owner, name)
    seen: list[Any] = []

    def spied(*args: Any, **kwargs: Any) -> Any:
        if isinstance(keep, Before):
            seen.append(keep.keep(*args, **kwargs))
        out = real(*args, **kwargs)
        if not isinstance(keep, Before):
            seen.append(out if keep is None else keep(out, *args, **kwargs))
        return out

    patch.setattr(owner, name, spied)
    return seen


def spy_live_kinds(patch: pytest.MonkeyPatch) -> tuple[list[Snapshot], list[Workspace]]:
    """While `patch` holds: the snapshots `LiveKinds.of` worked out kinds for, and the workspaces whose
    `live_kinds` were read (a classmethod and a property, which `spy` does not wrap)."""
    computed: list[Snapshot] = []
    asked: list[Workspace] = []
    real_of = LiveKinds.of.__func__  # type: ignore[attr-defined]
    real_live = Workspace.live_kinds.fget

    def of(cls: type[LiveKinds], snap: Snapshot) -> LiveKinds:
        computed.append(snap)
        return real_of(cls, snap)  # type: ignore[no-any-return]

    def live(ws: Workspace) -> LiveKinds:
        asked.append(ws)
        return real_live(ws)  # type: ignore[misc, no-any-return]

    patch.setattr(LiveKinds, "of", classmethod(of))
    patch.setattr(Workspace, "live_kinds", property(live))
    return computed, asked


def on_and_off(monkeypatch: pytest.MonkeyPatch, replay: Callable[[], Sequence[Plan]], *switches: Switch,
               spies: Mapping[str, Spy] | None = None, least: int = 50) -> tuple[Replayed, Replayed]:
    """Replay with every switch on (the fast path; or its fast value), then off (the reference), with the
    same spies in both; the two must plan alike (`same_plans`). Returns (fast, reference)."""
    runs = []
    for fast in (True, False):
        with monkeypatch.context() as patch:
            calls = {label: spy(patch, *target) for label, target in (spies or {}).items()}
            for owner, name, *values in switches:
                patch.setattr(owner, name, (values or [True, False])[0 if fast else 1])
            runs.append(Replayed(list(replay()), calls))
    same_plans(runs[0].plans, runs[1].plans, least)
    return runs[0], runs[1]


def compressed(workload: Workload, factor: float = 10.0) -> Workload:
    """`workload` (known-length jobs) with arrivals and work `factor` times shorter: the same line and contention,
    a `factor` times shorter run, and so far fewer decisions to replay (wake-ups and reports follow the clock)."""
    return replace(workload, jobs=tuple(
        replace(j, submit_time=j.submit_time / factor, truth=replace(j.truth, duration=j.truth.duration / factor),
                spec=replace(j.spec, estimate=j.spec.estimate and j.spec.estimate / factor))
        for j in workload.jobs))


def preset_plans(preset: str, workload: Workload, cluster: str = "4x4", config: SimConfig | None = None,
                 queues: Mapping[str, QueueSpec] | None = None, *, all_finish: bool = False) -> list[Plan]:
    """Every plan `preset` makes on `workload` (with `all_finish`, every job must have finished); the policy is
    built here, after the test set its switches."""
    policy = make_policy(preset)
    assert isinstance(policy, Cycle)
    recorder = Recorder(policy)
    controller = Controller(SimEngine(parse_shorthand(cluster), workload, config or SimConfig()), recorder,
                            queues=queues)
    controller.run()
    assert not all_finish or controller.summary().finished == len(workload.jobs)
    return recorder.plans


class Recorder:
    """A policy that decides with `cycle` and keeps every plan."""

    def __init__(self, cycle: Cycle) -> None:
        self.cycle = cycle
        self.name, self.interval, self.uses_models = cycle.name, cycle.interval, cycle.uses_models
        self.reads_few_jobs = cycle.reads_few_jobs  # the snapshot the preset gets in the product
        self.plans: list[Plan] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.cycle.decide(snapshot)
        self.plans.append(plan)
        return plan


def eager(self: Controller, changed: dict[str, str], rejected: Mapping[str, str], now: float) -> None:
    """The per-record loop the note streams replace: note every changed reason on its record at once."""
    for jid, reason in changed.items():
        record = self.live.get(jid)
        if record is None or jid in rejected:
            continue
        if record.why != reason or not record.decisions or record.decisions[-1][1] != reason:
            record.note(now, reason)
        self._said[jid] = reason


def observe_one_node_runs(book: ModelBook, spec: JobSpec, law: SpeedPredictor, runs: Sequence[tuple[int, int]],
                          grad_sqr: float, grad_var: float) -> None:
    """Job "a" reports once per (workers, global batch) run on one node, at `law`'s speed, with a loss and the given
    gradient statistics (the goodput tests' learning)."""
    for i, (w, batch) in enumerate(runs):
        alloc = Allocation.of(Placement(Role.WORKER, "n0") for _ in range(w))
        speed = law.steps_per_s(Config(w, 0, 1, float(batch)))
        book.observe("a", spec, Report(float(i), "a", 10 * (i + 1), loss=1.0, steps_per_s=speed, allocation=alloc,
                                       batch=batch, grad_sqr=grad_sqr, grad_var=grad_var))
