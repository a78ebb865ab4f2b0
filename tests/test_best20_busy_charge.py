"""best20: a running job's resize is charged a share of what it has left only while the cluster is busy."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from builders import cluster, running, snapshot
from trainmaster.core.job import Role
from trainmaster.models.book import JobModel
from trainmaster.models.speed import Config, Form, LinearScaling
from trainmaster.policies.optimus import BUSY_ARRIVALS, BUSY_WINDOW_S, RESTART_SHARE, Optimus
from trainmaster.policies.snapshot import Snapshot
from trainmaster.policies.trainmaster import GainSizing


def _long_job(*, spare_nodes: int, arrived_at: float, now: float) -> Snapshot:
    """A 40-GPU job (4 a node, 10,000 s left there, linear) that may grow by one, beside `BUSY_ARRIVALS` 1-GPU
    jobs submitted at `arrived_at` (2 GPUs left free beside them) and `spare_nodes` free nodes."""
    cl = cluster(18 + spare_nodes, 4)
    view = running("r", 40, on=[f"n{i // 4}" for i in range(40)], min_gpus=1, max_gpus=41)
    model = JobModel("r", Form.ALLREDUCE, 1.0, LinearScaling(Config(1), 1.0, 64), "test", 0.0, 400_000.0, 1)
    small = [running(f"s{i}", 1, on=f"n{10 + i // 4}", submit=arrived_at) for i in range(BUSY_ARRIVALS)]
    snap = snapshot(cl, view, *small, now=now)
    return dataclasses.replace(snap, models=MappingProxyType({"r": model}))


def _workers_twice(snap: Snapshot) -> tuple[int, int]:
    """The long job's workers in two decisions of one `Optimus` on `snap` (the first sets the full-cluster gate)."""
    opt = Optimus(restart_share=RESTART_SHARE)
    first = opt.decide(snap).allocations["r"].count(Role.WORKER)
    return first, opt.decide(snap).allocations["r"].count(Role.WORKER)


def test_a_long_job_is_not_restarted_for_a_few_percent_on_a_busy_cluster() -> None:
    # 40 -> 41 saves 2.4% of 10,000 s: more than the fixed 60 s, less than 60 s + 2% of 10,000 s. The first
    # decision has no last one that filled the cluster, so it resizes; the 41st GPU leaves 1 free (< a node).
    assert _workers_twice(_long_job(spare_nodes=0, arrived_at=900.0, now=1_000.0)) == (41, 40)
    assert GainSizing().optimus.restart_share == RESTART_SHARE > 0  # the preset's sizing hook carries it


def test_no_charge_when_jobs_arrived_before_the_window() -> None:
    assert _workers_twice(_long_job(spare_nodes=0, arrived_at=0.0, now=BUSY_WINDOW_S + 1.0)) == (41, 41)


def test_no_charge_when_the_last_decision_left_a_node_free() -> None:
    # a spare node: the 41st GPU leaves 5 free
    assert _workers_twice(_long_job(spare_nodes=1, arrived_at=900.0, now=1_000.0)) == (41, 41)
