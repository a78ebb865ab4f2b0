"""Builders for queue, preemption, elastic and backfill scenarios run end to end in the simulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.controller.why import advance_to
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import JobSpec, simple_job
from trainmaster.core.queue import QueueSpec, parse_quota
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


def queue(name: str, *, gpu: int | None = None, weight: float = 1.0, borrowing: bool = True,
          parent: str | None = None, priority: int = 0) -> QueueSpec:
    quota = None if gpu is None else parse_quota({"gpu": gpu}, "quota")
    return QueueSpec(name=name, weight=weight, quota=quota, parent=parent, priority=priority, borrowing=borrowing)


def queues(*specs: QueueSpec) -> dict[str, QueueSpec]:
    return {q.name: q for q in specs}


@dataclass(frozen=True)
class J:
    """A scenario job: submitted at `at`, runs `duration` seconds at its requested (minimum) GPUs."""

    name: str
    gpus: int = 1
    at: float = 0.0
    duration: float = 1000.0
    max_gpus: int | None = None
    fields: Mapping[str, object] = field(default_factory=dict)

    def spec(self) -> JobSpec:
        return simple_job(self.name, self.gpus, max_gpus=self.max_gpus, **self.fields)


def workload(*jobs: J) -> Workload:
    return Workload("scenario", tuple(
        WorkloadJob(j.name, j.at, j.spec(), LinearTruth(duration=j.duration, gpus=j.gpus)) for j in jobs))


@dataclass
class Run:
    controller: Controller
    engine: SimEngine
    log: list[tuple[float, str, str, int]]  # (time, what, job, gpus held after)

    def record(self, name: str) -> JobRecord:
        return self.controller.jobs[name]

    def starts(self) -> dict[str, float]:
        return {r.id: r.first_start for r in self.controller.jobs.values() if r.first_start is not None}

    def events(self, what: str) -> list[tuple[float, str]]:
        return [(t, j) for t, w, j, _ in self.log if w == what]


def simulate(cl: Cluster | str, policy: Policy, *jobs: J, qs: Mapping[str, QueueSpec] | None = None,
             until: float | None = None, restart_delay: float = 0.0) -> Run:
    """Run the jobs to the end (or to `until`), checking capacity and gang invariants after every cycle."""
    cluster = parse_shorthand(cl) if isinstance(cl, str) else cl
    engine = SimEngine(cluster, workload(*jobs), SimConfig(restart_delay=restart_delay))
    ctl = Controller(engine, policy, check=True, queues=qs)
    log: list[tuple[float, str, str, int]] = []
    ctl.listeners.append(lambda what, r: log.append(
        (engine.clock.now(), what, r.id, r.allocation.gpus(r.spec))) if what != "report" else None)
    if until is None:
        ctl.run()
    else:
        advance_to(ctl, until)
    return Run(ctl, engine, log)


def gpus_by_queue(ctl: Controller) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in ctl.live.values():
        if r.state.active:
            out[r.spec.queue] = out.get(r.spec.queue, 0) + r.allocation.gpus(r.spec)
    return out


def names(records: Sequence[JobRecord]) -> list[str]:
    return sorted(r.id for r in records)
