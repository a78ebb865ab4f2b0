"""Young/Daly: a job that leaves `checkpoint.every` open checkpoints at sqrt(2 C M) once revocations are seen."""

from __future__ import annotations

import pytest

from builders import job, node
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import TransientUse
from trainmaster.core.spec import job_from_mapping
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.checkpointing import CHECKPOINT_COST_S, RevocationRate, checkpoint_interval, young_daly
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


def _doc(**spec: object) -> dict[str, object]:
    return {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "j"},
            "spec": {"roles": {"worker": {"min": 1}}, **spec}}


def test_an_open_interval_is_auto_and_a_written_one_is_not() -> None:
    assert job_from_mapping(_doc()).checkpoint_auto
    assert job_from_mapping(_doc(checkpoint={"every": "auto"})).checkpoint_auto
    written = job_from_mapping(_doc(checkpoint={"every": "10m"}))
    assert not written.checkpoint_auto and written.checkpoint_every == 600.0


def test_the_rate_is_node_seconds_over_revocations() -> None:
    rate = RevocationRate()
    spot, od = node("s0", transient=True), node("od")
    for n in (spot, node("s1", transient=True), od):
        rate.joined(n, 0.0)
    assert rate.node_mtbf(500.0) is None  # no revocation yet: unknown
    rate.left(od, 100.0)  # an on-demand node's failure is no revocation
    rate.left(spot, 1000.0)
    assert rate.node_mtbf(1000.0) == 2000.0  # 2 transient nodes x 1,000 s, 1 revocation
    assert rate.node_mtbf(2000.0) == 3000.0  # the survivor's next 1,000 s count too
    auto = job("a", 1, checkpoint_auto=True)
    assert checkpoint_interval(auto, 2, rate, 1000.0) == pytest.approx(young_daly(CHECKPOINT_COST_S, 1000.0))
    assert young_daly(30.0, 6000.0) == 600.0
    assert checkpoint_interval(auto, 0, rate, 1000.0) == auto.checkpoint_every  # on on-demand nodes only
    assert checkpoint_interval(job("f", 1), 2, rate, 1000.0) == 300.0  # a written interval stands


def test_after_a_revocation_the_restarted_job_checkpoints_at_young_daly() -> None:
    cl = Cluster((node("s0", 1, transient=True), node("s1", 2, transient=True), node("od", 2)))
    auto = job("auto", 1, transient=TransientUse.PREFERRED, checkpoint_auto=True)
    fixed = job("fixed", 1, transient=TransientUse.PREFERRED)
    workload = Workload(name="t", jobs=(WorkloadJob("auto", 0.0, auto, LinearTruth(5000.0, 1)),
                                        WorkloadJob("fixed", 0.0, fixed, LinearTruth(5000.0, 1))))
    engine = SimEngine(cl, workload, SimConfig(restart_delay=0.0))
    engine.revoke("s0", 1000.0)
    controller = Controller(engine, make_policy("fifo"))
    while len(controller.live) < 2 or any(r.state.value != "running" for r in controller.live.values()):
        assert controller.step() and engine.clock.now() < 1000.0
    held = {jid: r.allocation.nodes for jid, r in controller.live.items()}
    assert held == {"auto": ("s0",), "fixed": ("s1",)}  # on transient nodes, as preferred; no rate known yet
    assert engine._jobs["auto"].spec.checkpoint_every == 300.0
    controller.step()  # s0 is revoked; auto restarts on s1's other GPU
    assert controller.live["auto"].allocation.nodes == ("s1",)
    # s0 and s1 lived 1,000 s each: 2,000 transient node-seconds for one revocation; auto holds one node.
    assert engine._jobs["auto"].spec.checkpoint_every == pytest.approx(young_daly(CHECKPOINT_COST_S, 2000.0))
    assert engine._jobs["fixed"].spec.checkpoint_every == 300.0  # its interval is written down
    controller.run()
    assert {r.state.value for r in controller.jobs.values()} == {"succeeded"}
