"""The autoscaler: nodes for pending jobs after the boot delay, idle ones given back, limits and budget kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import node as plain_node
from trainmaster.controller.autoscale import Autoscaler
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, NodeAdded, NodeLost
from trainmaster.core.job import TransientUse, simple_job
from trainmaster.core.market import AutoscaleSpec, Offer, gce_node_type
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.engines.provider import EngineProvider
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

K80X4 = replace(gce_node_type("k80", "us-central1-c", gpus=4), capacity=Resources(cpu=16000, memory=60 * 2**30, gpu=4))


class Recording(SimEngine):
    def wait(self, timeout: float | None) -> list[Event]:
        events = super().wait(timeout)
        self.__dict__.setdefault("seen", []).extend(events)
        return events


def _onprem(name: str, gpus: int, price: float = 0.0) -> Node:
    return replace(plain_node(name, gpus), price_per_hour=price)


def _setup(jobs: list[tuple[str, int, float, float]], spec: AutoscaleSpec, *onprem: Node,
           ) -> tuple[Controller, Recording, Autoscaler, EngineProvider]:
    work = Workload("t", tuple(WorkloadJob(n, at, simple_job(n, g), LinearTruth(secs, g)) for n, g, secs, at in jobs))
    engine = Recording(Cluster(onprem), work)
    provider = EngineProvider(engine)
    c = Controller(engine, make_policy("fifo"), check=True)
    scaler = Autoscaler(spec, provider).attach(c)
    return c, engine, scaler, provider


def _seen(engine: Recording, kind: type) -> list[tuple[float, str]]:
    out = []
    for e in engine.__dict__.get("seen", []):
        if isinstance(e, kind):
            out.append((e.time, e.node.name if isinstance(e, NodeAdded) else e.node))  # type: ignore[attr-defined]
    return out


def test_a_node_comes_for_a_pending_job_after_the_boot_delay_and_goes_after_idle() -> None:
    """`a` needs 4 GPUs; the on-premises node has 1 (busy with `b` for 5000 s, which keeps the run going).
    A transient k80x4 node is requested at 0, joins at 90 (boot delay), `a` runs 1000 s on it, and 300 s of
    idle later the node is given back. The idle on-premises node `spare` is never removed."""
    spec = AutoscaleSpec((Offer(K80X4, True, 2), Offer(K80X4, False, 2)), idle_timeout=300.0)
    c, engine, scaler, provider = _setup([("b", 1, 5000.0, 0.0), ("a", 4, 1000.0, 0.0)], spec,
                                         _onprem("op", 1), _onprem("spare", 1))
    c.run()
    made = K80X4.name + "-t1"  # transient: the cheaper offer
    assert _seen(engine, NodeAdded) == [(90.0, made)]
    assert c.jobs["a"].first_start == 90.0 and c.jobs["a"].finish_time == 1090.0
    assert _seen(engine, NodeLost) == [(1390.0, made)]
    assert sorted(n.name for n in c.cluster.nodes) == ["op", "spare"]
    assert (scaler.added, scaler.removed) == (1, 1)
    with pytest.raises(ValueError, match="on-premises nodes are never released"):
        provider.release("spare")
    # the cluster paid the transient node from its join to its release
    assert c.cost.node_hours(c.clock.now())["k80 transient"] == pytest.approx(1300 / 3600)


def test_limits_and_the_hourly_budget_cap_what_is_added() -> None:
    """Transient k80x4 nodes: at most 2; on-demand ones would break $2/h. `pair` (8 GPUs) gets two nodes;
    `big` (12 GPUs = 3 nodes) gets none (a partial gang would idle) and waits instead of being rejected."""
    assert K80X4.transient_price < 1.0 < K80X4.on_demand_price
    spec = AutoscaleSpec((Offer(K80X4, True, 2), Offer(K80X4, False, 5)), idle_timeout=1e6, max_cost_per_hour=2.0)
    c, engine, scaler, provider = _setup([("big", 12, 100.0, 0.0)], spec, _onprem("op", 1))
    c.run(max_cycles=20)
    assert provider.requested == 0 and scaler.refused >= 1
    assert c.jobs["big"].state.value == "pending"
    c, engine, scaler, provider = _setup([("pair", 8, 100.0, 0.0), ("more", 4, 100.0, 10.0)], spec, _onprem("op", 1))
    c.run(max_cycles=20)
    assert sorted(n for _, n in _seen(engine, NodeAdded)) == [K80X4.name + "-t1", K80X4.name + "-t2"]
    assert provider.requested == 2 and c.jobs["pair"].state.value == "succeeded"
    assert c.jobs["more"].first_start is not None and c.jobs["more"].first_start >= c.jobs["pair"].finish_time


def test_no_node_is_added_once_the_cluster_spent_its_budget() -> None:
    """The on-premises node costs $36/h: by t=1000 the cluster spent $10 > the $5 budget; `late` gets nothing."""
    spec = AutoscaleSpec((Offer(K80X4, True, 2),), idle_timeout=1e6, budget=5.0)
    c, _engine, scaler, provider = _setup([("b", 1, 3000.0, 0.0), ("late", 4, 100.0, 1000.0)], spec,
                                         _onprem("op", 1, price=36.0))
    c.run(max_cycles=20)
    assert provider.requested == 0 and scaler.refused >= 1
    assert c.jobs["late"].state.value == "pending"


def test_a_job_that_must_stay_on_demand_gets_on_demand_nodes() -> None:
    spec = AutoscaleSpec((Offer(K80X4, True, 2), Offer(K80X4, False, 1)), idle_timeout=10.0)
    work = Workload("t", (WorkloadJob("a", 0.0, replace(simple_job("a", 4), transient=TransientUse.NEVER),
                                      LinearTruth(50.0, 4)),))
    engine = Recording(Cluster((_onprem("op", 1),)), work)
    provider = EngineProvider(engine)
    c = Controller(engine, make_policy("fifo"), check=True)
    Autoscaler(spec, provider).attach(c)
    c.run()
    assert _seen(engine, NodeAdded) == [(90.0, K80X4.name + "-d1")]
    assert c.jobs["a"].state.value == "succeeded"
