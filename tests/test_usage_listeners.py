"""Usage metrics are listeners: the timeline, Prometheus' GPU-seconds and any other get the same calls."""

from __future__ import annotations

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.fifo import make as fifo
from trainmaster.server.prom import GpuSeconds
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float, str, int]] = []

    def allocated(self, t: float, record: JobRecord, used_gpus: int) -> None:
        self.calls.append(("allocated", t, f"{record.id}:{record.gpus_held}", used_gpus))

    def capacity_changed(self, t: float, gpus: int) -> None:
        self.calls.append(("capacity", t, "", gpus))


def _controller() -> Controller:
    jobs = (("a", 0.0, 4, 100.0), ("b", 10.0, 2, 50.0), ("c", 20.0, 4, 30.0))
    workload = Workload("t", tuple(WorkloadJob(j, t, simple_job(j, g), LinearTruth(duration=d, gpus=g))
                                   for j, t, g, d in jobs))
    engine = SimEngine(parse_shorthand("2x4"), workload, SimConfig())
    return Controller(engine, fifo(), check=True)


def test_every_allocation_change_reaches_every_listener_in_order() -> None:
    c = _controller()
    recorder, gpu_seconds = Recorder(), GpuSeconds(0.0, 0)
    c.usage_listeners += [recorder, gpu_seconds]
    c.run()
    starts = [(t, who, used) for what, t, who, used in recorder.calls if what == "allocated" and not who.endswith(":0")]
    assert starts == [(0.0, "a:4", 4), (10.0, "b:2", 6), (60.0, "c:4", 8)]  # c waits for b's 2 GPUs
    # The timeline is one listener among others: the steps the recorder saw, merged per instant.
    assert c.usage.points == [(0.0, 4), (10.0, 6), (60.0, 8), (90.0, 4), (100.0, 0)]
    end = max(r.finish_time or 0.0 for r in c.jobs.values())
    assert gpu_seconds.total(end) == c.usage.gpu_seconds(0.0, end) == 4 * 100 + 2 * 50 + 4 * 30


def test_a_lost_node_changes_the_capacity_listeners_see() -> None:
    c = _controller()
    recorder = Recorder()
    c.usage_listeners.append(recorder)
    c.step()
    c.engine.revoke(c.cluster.nodes[1].name, at=5.0)  # type: ignore[attr-defined]
    c.run()
    assert ("capacity", 5.0, "", 4) in recorder.calls
    assert c.usage.capacity == 4
