"""trainmaster's order kept across decisions (`RemainingOrder.kept_order`): each job's (class, remaining) key
leads its LAS entry's key in `TiresiasOrder.keys`, moved by the snapshot's journal and by the models of the
jobs that may predict (`watched`), so the order is read off the kept keys instead of sorted at each decision.

Replayed with the switch on and off (`same_plans`: every plan, allocations and waits in order) on three
workloads -- Philly's first jobs and a synthetic line (no targets: no key reads a model), PS jobs with loss targets
(models predict and move between decisions, without a new view) -- and at every order call the order is
the reference's: the LAS order (the entries' own keys) sorted stably by a key worked out afresh. And its sizes
kept by the journal (`OnlyWithServices`' `KeptSizes(journal=True)`), on and off alike on the same workloads.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.replay_helpers import on_and_off, preset_plans
from tests.test_model_groups import _philly
from tests.test_tir23_journal import _sizes_as_reference

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.policies import las
from trainmaster.policies.cycle import KeptSizes
from trainmaster.policies.las import RemainingOrder
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.tiresias import TiresiasOrder
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.ps_truth import ps_workload


def _as_reference(out: list[JobView], self: RemainingOrder, snap: Snapshot) -> bool:
    """The order handed out is the LAS order sorted by each job's key worked out now; whether it was read off
    the kept leads."""
    entries = self.ranks.entries
    las_order = sorted(snap.jobs.values(), key=lambda job: entries[job.id].key)
    reference = sorted(las_order, key=lambda job: las._key(snap, job))
    assert [job.id for job in out] == [job.id for job in reference]
    assert all(a is b for a, b in zip(out, reference, strict=True))
    return self.ranks.lead is self and self.ranks.led


def _workloads(shared_data: Path) -> dict[str, tuple[Workload, str, SimConfig]]:
    learn = SimConfig(report_interval=LEARNING_REPORT_INTERVAL)
    return {"philly": (_philly(shared_data), "4x8", learn),
            "ps-loss": (ps_workload(40, rate_per_hour=60, seed=3), "2x4", learn),
            "synthetic": (load_workload("synthetic:150:60", max_factor=1.0, seed=3, oracle=True), "4x4", learn)}


@pytest.mark.parametrize("name", ["philly", "ps-loss", "synthetic"])
def test_kept_order_plans_alike(name: str, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workload, cluster, config = _workloads(shared_data)[name]
    spies: dict[str, Any] = {"order": (RemainingOrder, "__call__", _as_reference),
                             "moved": (RemainingOrder, "moved")}
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans("trainmaster", workload, cluster, config),
                            (RemainingOrder, "kept_order"), spies=spies, least=50)
    served = fast.calls["order"]
    assert sum(served) > 0.8 * len(served) > 50  # the kept leads served most decisions
    assert not any(slow.calls["order"])  # the reference never keeps them
    watched = sum(map(len, fast.calls["moved"]))
    if name != "ps-loss":
        assert watched == 0  # (no targets: no key reads a model)
    else:
        assert watched > 100  # (targets: the models were read for keys that may move without a view)


def _snap(views: dict[str, JobView], version: int, changed: frozenset[str], joined: frozenset[str] = frozenset(),
          models: dict[str, Any] | None = None) -> Snapshot:
    cluster = parse_shorthand("2x4")
    held = {jid: v.allocation for jid, v in views.items() if v.active}
    pending = PendingIds([jid for jid, v in views.items() if v.pending], "origin", version, joined, frozenset(),
                         changed)
    return Snapshot(now=0, cluster=cluster, jobs=views, free={n.name: n.capacity for n in cluster.nodes},
                    held=held, pending_ids=pending, models=models or {})


class _Model:
    """A model as `predicted_remaining` reads it: remaining steps at a speed (`remaining_time`)."""

    def __init__(self, left: float | None) -> None:
        self.remaining, self.speed, self.left = left, object(), left

    def remaining_time(self, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
        return self.left


def _view(jid: str, submit: float, target: bool) -> JobView:
    spec = simple_job(jid, gpus=1)
    if target:
        spec = replace(spec, target=replace(spec.target, steps=1000))
    return JobView(jid, spec, JobState.PENDING, submit)


def test_a_moved_model_or_view_moves_its_job_and_a_skipped_version_or_a_nan_takes_the_reference() -> None:
    """A job with a target whose model moves without a new view moves in the order (the journal names nobody:
    `moved` does); a job without one is never watched, and its view rebuilt with another class moves it (the
    journal); a snapshot that is not the next one drops the leads (the reference sort) and the next journaled
    one keeps them again; a NaN remaining time is served by the reference."""
    order = RemainingOrder()
    views = {"a": _view("a", 0.0, True), "b": _view("b", 1.0, True), "c": _view("c", 2.0, False)}
    first = _snap(views, 1, frozenset(views), frozenset(views), {"a": _Model(50.0), "b": _Model(10.0)})
    assert [j.id for j in order(first)] == ["c", "b", "a"]  # (c: no prediction, first; then b's 10 s, a's 50 s)
    assert order.ranks.lead is None  # (no journal before: the reference)
    second = _snap(views, 2, frozenset(), models={"a": _Model(5.0), "b": _Model(10.0)})
    assert [j.id for j in order(second)] == ["c", "a", "b"]  # (every lead worked out: kept from here on)
    assert order.ranks.led and order.watched == {"a", "b"}
    third = _snap(views, 3, frozenset(), models={"a": _Model(20.0), "b": _Model(10.0)})
    assert [j.id for j in order(third)] == ["c", "b", "a"] and order.ranks.led  # (a's model moved: no view did)
    views["c"] = replace(views["c"], spec=replace(views["c"].spec, priority=-1))
    fourth = _snap(views, 4, frozenset("c"), models={"a": _Model(20.0), "b": _Model(10.0)})
    assert [j.id for j in order(fourth)] == ["b", "a", "c"] and order.ranks.led  # (c's class: after the others)
    skipped = _snap(views, 6, frozenset(), models={"a": _Model(5.0), "b": _Model(10.0)})
    assert [j.id for j in order(skipped)] == ["a", "b", "c"] and order.ranks.lead is None  # (the reference)
    assert all(e.lead == () for e in order.ranks.entries.values())
    nan = _snap(views, 7, frozenset(), models={"a": _Model(math.nan), "b": _Model(10.0)})
    las_order = [views[j] for j in ("a", "b", "c")]
    assert order(nan) == order._sorted(nan, las_order) and order.ranks.lead is None
    again = _snap(views, 8, frozenset(), models={"a": _Model(30.0), "b": _Model(40.0)})
    assert [j.id for j in order(again)] == ["a", "b", "c"] and order.ranks.led
    assert isinstance(order.ranks, TiresiasOrder) and order.ranks.keys == sorted(order.ranks.keys)

@pytest.mark.parametrize("name", ["philly", "ps-loss", "synthetic"])
def test_trainmaster_sizes_follow_the_journal_plan_alike(name: str, shared_data: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`OnlyWithServices`' `KeptSizes(journal=True)`: trainmaster's sizes kept as one mapping moved on by the
    journal (keys in another order; every later phase, `GainSizing` included, reads them by id): on and off
    (`KeptSizes.followed`) plan alike, at every call the sizes are `current_or_min`'s key for key, and the
    journal served most calls."""
    workload, cluster, config = _workloads(shared_data)[name]
    spies: dict[str, Any] = {"sizes": (KeptSizes, "__call__", _sizes_as_reference), "follow": (KeptSizes, "_follow")}
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans("trainmaster", workload, cluster, config),
                            (KeptSizes, "followed"), spies=spies, least=50)
    served = [out is not None for out in fast.calls["follow"]]
    assert sum(served) > 0.8 * len(fast.calls["sizes"]) > 50
    assert not slow.calls["follow"]
