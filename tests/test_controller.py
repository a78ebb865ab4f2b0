"""The controller loop and the diff phase, driven by the real simulator engine."""

from __future__ import annotations

from trainmaster.controller.diff import diff
from trainmaster.controller.loop import Controller
from trainmaster.core.actions import ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.fifo import make as fifo
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


def _workload(*jobs: tuple[str, float, int, float]) -> Workload:
    """(id, submit, gpus, duration) tuples -> a workload of fixed-size jobs."""
    return Workload("test", tuple(
        WorkloadJob(jid, t, simple_job(jid, gpus), LinearTruth(duration=d, gpus=gpus)) for jid, t, gpus, d in jobs
    ))


def _run(workload: Workload, cluster: str = "2x4", **config: float) -> Controller:
    engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(**config))  # type: ignore[arg-type]
    controller = Controller(engine, fifo(), check=True)
    controller.run()
    return controller


def test_fifo_gang_waits_and_blocks_later_jobs() -> None:
    c = _run(_workload(("a", 0, 6, 100), ("big", 1, 8, 50), ("small", 2, 1, 10)))
    jobs = c.jobs
    assert jobs["a"].first_start == 0 and jobs["a"].finish_time == 100
    # `big` needs the whole 8-GPU cluster: it waits for `a`; strict FIFO keeps `small` behind it.
    assert jobs["big"].first_start == 100 and jobs["big"].finish_time == 150
    assert jobs["small"].first_start == 150
    assert all(r.state is JobState.SUCCEEDED for r in jobs.values())
    assert "waiting behind big" in [text for _, text in jobs["small"].decisions][1]


def test_job_larger_than_cluster_is_rejected_with_reason() -> None:
    c = _run(_workload(("huge", 0, 16, 10), ("ok", 0, 1, 10)))
    assert c.jobs["huge"].state is JobState.REJECTED
    assert "needs gpu=16" in c.jobs["huge"].message
    assert c.jobs["ok"].state is JobState.SUCCEEDED


def test_node_loss_requeues_and_loses_work_since_checkpoint() -> None:
    wl = _workload(("a", 0, 4, 1000))
    engine = SimEngine(parse_shorthand("2x4"), wl, SimConfig(restart_delay=30))
    c = Controller(engine, fifo(), check=True)
    first_node = None

    def on(what: str, record: object) -> None:
        nonlocal first_node
        if what == "start" and first_node is None:
            first_node = c.jobs["a"].allocation.nodes[0]

    c.listeners.append(on)
    c.cycle()
    c.step()  # arrival -> start
    assert first_node is not None
    engine.revoke(first_node, at=500)
    c.run()
    rec = c.jobs["a"]
    assert rec.state is JobState.SUCCEEDED and rec.restarts == 1
    assert first_node not in c.cluster
    # Default checkpoint every 300 s: 200 s of work lost, plus the 30 s restart.
    assert rec.finish_time == 1000 + 200 + 30


def test_usage_and_summary() -> None:
    c = _run(_workload(("a", 0, 4, 100), ("b", 0, 4, 100)), cluster="1x8")
    s = c.summary()
    assert s.finished == 2 and s.makespan == 100 and s.gpu_utilization == 1.0 and s.mean_jct == 100


def _view(jid: str, alloc: Allocation, since: float = 0.0) -> JobView:
    return JobView(id=jid, spec=simple_job(jid, 1, min_gpus=1, max_gpus=4), state=JobState.RUNNING,
                   submit_time=0, allocation=alloc, running_since=since)


def test_diff_orders_stops_before_starts_and_damps_growth() -> None:
    one = Allocation.of([Placement(Role.WORKER, "n0")])
    two = Allocation.of([Placement(Role.WORKER, "n0"), Placement(Role.WORKER, "n1")])
    cluster = parse_shorthand("2x4")
    pending = JobView(id="p", spec=simple_job("p", 1), state=JobState.PENDING, submit_time=0)
    snap = Snapshot(now=100, cluster=cluster,
                    jobs={"grow": _view("grow", one, since=90), "stop": _view("stop", one), "p": pending},
                    free={n.name: Resources(gpu=3) for n in cluster.nodes})
    plan = Plan(allocations={"grow": two, "p": one})
    kinds = [(a.kind, a.job_id) for a in diff(snap, plan)]
    assert kinds == [(ActionKind.STOP, "stop"), (ActionKind.RESIZE, "grow"), (ActionKind.START, "p")]
    damped = [(a.kind, a.job_id) for a in diff(snap, plan, damping=60)]
    assert damped == [(ActionKind.STOP, "stop"), (ActionKind.START, "p")]
