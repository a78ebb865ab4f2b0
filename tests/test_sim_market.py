"""Revocations, lost work and cost in the simulator, under the real controller."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from builders import node as plain_node
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, NodeAdded, NodeLost, RevocationNotice
from trainmaster.core.job import simple_job
from trainmaster.core.market import Availability, Revocation
from trainmaster.core.node import Node
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob
from trainmaster.workloads.market import Lifetime, LifetimeMarket, TraceMarket


def node(name: str, gpus: int, **fields: object) -> Node:
    return replace(plain_node(name, gpus), **fields)  # type: ignore[arg-type]


class FixedMarket:
    """Revokes the named nodes at the given times with a 30 s notice."""

    notice = 30.0

    def __init__(self, lost_at: dict[str, float]) -> None:
        self.lost_at = lost_at

    def revocation(self, n: Node, joined_at: float) -> Revocation | None:
        t = self.lost_at.get(n.name)
        return None if t is None else Revocation(n.name, t - self.notice, t, "revoked")

    def availability(self) -> Sequence[Availability]:
        return ()


class Recording(SimEngine):
    seen: list[Event]

    def wait(self, timeout: float | None) -> list[Event]:
        events = super().wait(timeout)
        self.__dict__.setdefault("seen", []).extend(events)
        return events


def _workload(*jobs: tuple[str, int, float], checkpoint: float = 300.0) -> Workload:
    """Jobs whose whole gang may run on transient nodes (`anchorsOnDemand: false`)."""
    return Workload("t", tuple(
        WorkloadJob(name, 0.0, replace(simple_job(name, gpus), checkpoint_every=checkpoint, anchors_on_demand=False),
                    LinearTruth(secs, gpus))
        for name, gpus, secs in jobs))


def test_a_revocation_loses_exactly_the_work_since_the_last_checkpoint() -> None:
    """Two 4-GPU jobs (1000 s and 5000 s, checkpoint every 100 s) on a transient and an on-demand node; the
    transient one is revoked at 250 (notice at 220): its job loses steps 200..250, the replacement joins 60 s
    later, the job restarts (30 s) from step 200 and needs the rest of its length."""
    cl = Cluster((node("n0", 4, transient=True, price_per_hour=3.6), node("n1", 4)))
    engine = Recording(cl, _workload(("a", 4, 1000.0), ("b", 4, 5000.0), checkpoint=100.0),
                       SimConfig(restart_delay=30.0), market=FixedMarket({"n0": 250.0}), replace_delay=60.0)
    c = Controller(engine, make_policy("fifo"), check=True)
    c.drain_on_notice = False  # the job ignores the notice: the loss kills it
    c.run()
    hit = next(r for r in c.jobs.values() if r.restarts)
    assert hit.finish_time == 250 + 60 + 30 + ((hit.spec.name == "a" and 800) or 4800)
    assert engine.steps_lost == {hit.id: 50.0} and engine.work_lost == {hit.id: 200.0}  # 50 s x 4 GPUs
    notices = [e for e in engine.seen if isinstance(e, RevocationNotice)]
    assert notices == [RevocationNotice(220.0, "n0", 250.0)] and c.revocations == 1
    assert [(e.time, e.node) for e in engine.seen if isinstance(e, NodeLost)] == [(250.0, "n0")]
    assert [(e.time, e.node.name) for e in engine.seen if isinstance(e, NodeAdded)] == [(310.0, "n0~1")]
    assert engine.revoked == [(250.0, "n0", "revoked")] and hit.restarts == 1
    # the cluster paid n0 for 250 s and its replacement from 310 on; the job paid while it held them
    # (restarting included)
    end = c.clock.now()
    assert math.isclose(c.cost.cluster_dollars(end), 0.001 * (250 + end - 310))
    assert math.isclose(c.cost.job_cost(hit.id, end), 0.001 * (250 + hit.finish_time - 310))


def test_at_the_notice_the_job_checkpoints_and_moves_so_the_revocation_loses_nothing() -> None:
    """The same revocation with the controller's default, drain on notice: at 220 the job on n0 is stopped
    gracefully (it checkpoints at 220), n0 takes no task from then on, the job waits for the replacement (310),
    restarts (30 s) and needs only what it had not done: nothing is lost, and it is a preemption, not a failure."""
    cl = Cluster((node("n0", 4, transient=True, price_per_hour=3.6), node("n1", 4)))
    engine = Recording(cl, _workload(("a", 4, 1000.0), ("b", 4, 5000.0), checkpoint=100.0),
                       SimConfig(restart_delay=30.0), market=FixedMarket({"n0": 250.0}), replace_delay=60.0)
    c = Controller(engine, make_policy("fifo"), check=True)
    c.run()
    hit = next(r for r in c.jobs.values() if r.preemptions)
    length = 1000.0 if hit.spec.name == "a" else 5000.0
    assert hit.restarts == 0 and hit.preemptions == 1
    assert hit.finish_time == 310 + 30 + (length - 220)
    assert engine.steps_lost == {} and engine.work_lost == {}
    assert engine.revoked == [(250.0, "n0", "revoked")] and c.revocations == 1
    assert all(r.state.value == "succeeded" for r in c.jobs.values())


def test_cost_sums_by_the_second() -> None:
    """One on-demand node at $3.60/h ($0.001/s) with 4 GPUs; a holds 2 GPUs for 1000 s, b 2 GPUs for 500 s.
    A transient node at $0.72/h joins at 200 and is revoked at 700, unused: the cluster pays 500 s of it."""
    cl = Cluster((node("n0", 4, price_per_hour=3.6),))
    engine = SimEngine(cl, _workload(("a", 2, 1000.0), ("b", 2, 500.0)))
    engine.add_node(node("spot", 4, transient=True, price_per_hour=0.72, gpu_type="k80"), at=200.0)
    engine.revoke("spot", 700.0)
    c = Controller(engine, make_policy("fifo"), check=True)
    c.run()
    end = c.clock.now()
    assert end == 1000.0
    assert math.isclose(c.cost.job_cost("a", end), 0.5 * 0.001 * 1000)
    assert math.isclose(c.cost.job_cost("b", end), 0.5 * 0.001 * 500)
    assert math.isclose(c.cost.cluster_dollars(end), 1.0 + 0.0002 * 500)
    assert c.cost.gpu_hours(end) == {"gpu on-demand": (2 * 1000 + 2 * 500) / 3600}
    assert c.cost.node_hours(end) == {"gpu on-demand": 1000 / 3600, "k80 transient": 500 / 3600}


def test_an_availability_drop_revokes_the_newest_nodes_of_its_zone_and_type() -> None:
    nodes = tuple(node(f"s{i}", 1, transient=True, zone="z", gpu_type="k80") for i in range(3))
    other = node("o", 1, transient=True, zone="y", gpu_type="k80")
    market = TraceMarket([Availability(0.0, "z", "k80", 3), Availability(100.0, "z", "k80", 1)])
    engine = Recording(Cluster((*nodes, other)), _workload(("a", 1, 500.0)), market=market)
    c = Controller(engine, make_policy("fifo"))
    c.run()
    assert [(e.time, e.node) for e in engine.seen if isinstance(e, RevocationNotice)] == [(100, "s2"), (100, "s1")]
    assert [(e.time, e.node) for e in engine.seen if isinstance(e, NodeLost)] == [(130, "s2"), (130, "s1")]
    assert sorted(n.name for n in c.cluster.nodes) == ["o", "s0"]


def test_hazard_market_runs_end_and_repeat_bit_for_bit() -> None:
    """Nodes revoked after an hour (half of them) or at the 24 h cap, replaced after 90 s: the run still
    ends when the jobs do, and the same seed gives the same run."""
    lifetimes = [Lifetime("k80", "z", 3600.0, True), Lifetime("k80", "z", 86_460.0, False)]
    cl = Cluster(tuple(node(f"n{i}", 4, transient=True, zone="z", gpu_type="k80", price_per_hour=0.7)
                       for i in range(4)))

    def once(seed: int) -> tuple[object, ...]:
        work = _workload(*((f"j{i}", 4, 3000.0 + 500 * i) for i in range(8)), checkpoint=600.0)
        engine = SimEngine(cl, work, SimConfig(seed=seed), market=LifetimeMarket(lifetimes, seed=seed),
                           replace_delay=90.0)
        c = Controller(engine, make_policy("fifo"), check=True)
        c.run()
        assert all(r.state.value == "succeeded" for r in c.jobs.values())
        return tuple(engine.revoked), tuple(c.outcomes()), round(c.cost.cluster_dollars(c.clock.now()), 9)

    first = once(1)
    assert first == once(1) and first[0]
    assert first[0] != once(2)[0]


def test_a_node_given_back_before_its_revocation_is_neither_revoked_nor_replaced() -> None:
    cl = Cluster((node("keep", 4), node("spot", 4, transient=True)))
    engine = Recording(cl, _workload(("a", 4, 1000.0)), market=FixedMarket({"spot": 500.0}), replace_delay=60.0)
    c = Controller(engine, make_policy("fifo"))
    c.cycle()
    engine.remove_node("spot")  # released at 0 (an autoscaler's scale-down), long before its revocation
    c.run()
    assert engine.revoked == [] and c.revocations == 0
    assert [e.node for e in engine.seen if isinstance(e, NodeLost)] == ["spot"]
    assert not [e for e in engine.seen if isinstance(e, NodeAdded)]
