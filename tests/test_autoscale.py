"""The autoscaler: nodes for pending jobs after the boot delay, idle ones given back, limits and budget kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import node as plain_node
from trainmaster.controller.autoscale import Autoscaler
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, NodeAdded, NodeLost
from trainmaster.core.job import JobSpec, TransientUse, simple_job
from trainmaster.core.market import AutoscaleSpec, Market, NodeType, Offer, Revocation, gce_node_type
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


def _typed_x4(gpu: str) -> NodeType:
    return replace(gce_node_type(gpu, "us-central1-a", gpus=4), capacity=Resources(cpu=16000, memory=60 * 2**30, gpu=4))


def _first_node(spec: JobSpec, offers: tuple[Offer, ...], market: Market | None = None,
                policy: str = "fifo", onprem: tuple[Node, ...] = (), secs: float = 50.0,
                more: tuple[WorkloadJob, ...] = ()) -> tuple[Controller, Recording, Autoscaler]:
    gpus = spec.min_gpus
    work = Workload("t", (WorkloadJob(spec.name, 0.0, spec, LinearTruth(secs, gpus)), *more))
    engine = Recording(Cluster(onprem or (_onprem("op", 1),)), work, market=market)
    c = Controller(engine, make_policy(policy), check=True)
    scaler = Autoscaler(AutoscaleSpec(offers, idle_timeout=10.0), EngineProvider(engine)).attach(c)
    c.run()
    return c, engine, scaler


def test_offers_are_ranked_as_placement_scores_gpu_types() -> None:
    """Generic prior k80 1 : p100 3.3 : v100 4.1 (transient $/GPU-h 0.145 / 0.44 / 0.75): a job without a budget
    gets the fastest type; one with a budget the most speed per dollar (p100: 7.5 vs k80 6.9, v100 5.5);
    `requireGpuTypes` is obeyed, `gpuTypes` ranks first."""
    offers = tuple(Offer(_typed_x4(g), True, 2) for g in ("k80", "p100", "v100"))
    base = simple_job("j", 4)
    for spec, gpu in ((base, "v100"), (replace(base, budget=100.0), "p100"),
                      (replace(base, require_gpu_types=("k80",)), "k80"), (replace(base, gpu_types=("p100",)), "p100")):
        c, engine, _ = _first_node(spec, offers)
        assert [n for _, n in _seen(engine, NodeAdded)] == [_typed_x4(gpu).name + "-t1"], spec
        assert c.jobs["j"].state.value == "succeeded"


def test_a_fixed_size_gang_is_provided_transient_nodes_only() -> None:
    """No on-demand anchor for a fixed all-reduce gang (`JobSpec.anchored`); an elastic one gets its chief an
    on-demand node (and the rest of its minimum beside it, where placement packs it)."""
    offers = (Offer(K80X4, True, 4), Offer(K80X4, False, 4))
    cpu_only = (_onprem("op", 0),)
    _, engine, _ = _first_node(simple_job("j", 4), offers, onprem=cpu_only)
    assert [n for _, n in _seen(engine, NodeAdded)] == [K80X4.name + "-t1"]
    _, engine, _ = _first_node(simple_job("j", 4, min_gpus=2, max_gpus=4), offers, onprem=cpu_only)
    assert [n for _, n in _seen(engine, NodeAdded)][:1] == [K80X4.name + "-d1"]


class _Every:
    """Revokes every transient node `life` seconds after it joins (notice 30 s before)."""

    def __init__(self, life: float) -> None:
        self.life = life

    def revocation(self, node: Node, joined_at: float) -> Revocation | None:
        return Revocation(node.name, joined_at + self.life - 30.0, joined_at + self.life, "revoked")

    def availability(self) -> tuple[()]:
        return ()


def test_a_job_revoked_again_and_again_gets_nodes_each_time() -> None:
    """Nodes live 1,000 s; the 4-GPU job needs 5,000 s of them: five or more nodes, one after another (the
    limit on asks counts only those since the job last ran)."""
    c, _engine, scaler = _first_node(replace(simple_job("j", 4), checkpoint_every=100.0), (Offer(K80X4, True, 2),),
                                     market=_Every(1000.0), secs=5000.0)
    assert c.jobs["j"].state.value == "succeeded" and scaler.added >= 5 and c.revocations >= 4


def test_a_job_a_preemptive_order_put_back_gets_a_node() -> None:
    """Tiresias puts `long` (past its 16 GPU-hour threshold) back for `new` on the one on-premises GPU: `long`
    waits for priority, and a node comes for it instead of it waiting for `new` to finish."""
    k80 = replace(gce_node_type("k80", "us-central1-c"), capacity=Resources(cpu=4000, memory=15 * 2**30, gpu=1))
    new = WorkloadJob("new", 60_000.0, simple_job("new", 1), LinearTruth(20_000.0, 1))
    c, engine, _ = _first_node(simple_job("long", 1), (Offer(k80, True, 2),), policy="tiresias",
                               onprem=(_onprem("op", 1),), secs=100_000.0, more=(new,))
    assert c.jobs["long"].preemptions >= 1 and _seen(engine, NodeAdded)
    done = c.jobs["long"].finish_time  # waiting for `new` (done at 80,000) it would end past 120,000
    assert done is not None and done < 101_000


def test_consolidation_empties_a_node_left_fragmented_and_gives_it_back() -> None:
    """Two transient k80x4 nodes come at 90: t1 holds `big1` (3 GPUs, done at 1,090) and `small1` (1 GPU, long),
    t2 holds `big2` (3 GPUs, long) and `small2` (done at 1,090). From 1,090 t1 is a quarter used; after the idle
    timeout (100 s) `small1` moves to t2's free GPU and t1 is given back. Without consolidation t1 stays paid
    until `small1` ends."""
    jobs = [("big1", 3, 1000.0, 0.0), ("small1", 1, 20_000.0, 0.0), ("big2", 3, 20_000.0, 0.0),
            ("small2", 1, 1000.0, 0.0)]
    hours = {}
    for consolidate in (False, True):
        spec = AutoscaleSpec((Offer(K80X4, True, 4),), idle_timeout=100.0, consolidate=consolidate)
        c, engine, scaler, _ = _setup(jobs, spec, _onprem("op", 0))
        c.run()
        assert all(r.state.value == "succeeded" for r in c.jobs.values())
        hours[consolidate] = c.cost.node_hours(c.clock.now())["k80 transient"]
        if consolidate:
            assert scaler.moved == 1 and (1190.0, K80X4.name + "-t1") in _seen(engine, NodeLost)
            assert c.jobs["small1"].preemptions == 1 and c.jobs["big2"].preemptions == 0
        else:
            assert scaler.moved == 0
    assert hours[True] < hours[False] - 5.0  # t1's ~5.4 h after 1,190 s are not paid
