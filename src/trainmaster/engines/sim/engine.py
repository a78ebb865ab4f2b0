"""Discrete-event engine: a heap of (time, seq, event), seeded, reproducible to the bit.

Jobs progress at their ground-truth speed (from the workload's `JobTruth`);
a job whose allocation changes pays a checkpoint-restart delay. Jobs report
step, speed and loss as real ones do, so online models learn from reports only.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.clock import ManualClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, JobArrived, JobFinished, JobRunning, NodeLost, Report
from trainmaster.core.job import JobSpec
from trainmaster.workloads.base import JobTruth, Workload

EPS = 1e-9


@dataclass
class _SimJob:
    spec: JobSpec
    truth: JobTruth
    allocation: Allocation = EMPTY
    done: float = 0.0  # steps completed
    checkpointed: float = 0.0  # steps saved in the last checkpoint
    rate: float = 0.0  # steps/s while running
    since: float = 0.0  # time `done` was last brought up to date
    running: bool = False
    version: int = 0  # bumped on every change; stale heap entries are skipped
    started_once: bool = False


@dataclass
class SimConfig:
    restart_delay: float = 30.0  # checkpoint-restart cost of a resize, migration or resume
    start_delay: float = 0.0  # cost of the very first start
    report_interval: float | None = None  # seconds between progress reports (None: only at start)
    speed_noise: float = 0.0  # relative std-dev of reported speed
    loss_noise: float = 0.0  # relative std-dev of reported loss
    seed: int = 0


@dataclass(order=True)
class _Item:
    time: float
    seq: int
    kind: str = field(compare=False)
    job_id: str = field(compare=False)
    version: int = field(compare=False, default=0)
    payload: object = field(compare=False, default=None)


class SimEngine:
    """An engine whose clock only moves from event to event."""

    def __init__(self, cluster: Cluster, workload: Workload, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.clock: ManualClock = ManualClock(0.0)
        self._cluster = cluster
        self._heap: list[_Item] = []
        self._seq = itertools.count()
        self._jobs: dict[str, _SimJob] = {}
        self._rng = random.Random(self.config.seed)
        self.events_processed = 0
        for wj in workload.jobs:
            self._jobs[wj.job_id] = _SimJob(spec=wj.spec, truth=wj.truth)
            self._push(wj.submit_time, "arrive", wj.job_id)

    # -- engine protocol -----------------------------------------------------
    def cluster(self) -> Cluster:
        return self._cluster

    def idle(self) -> bool:
        return not self._heap

    def apply(self, actions: Sequence[Action]) -> None:
        now = self.clock.now()
        for action in actions:
            job = self._jobs[action.job_id]
            self._advance(job, now)
            job.version += 1
            job.running = False
            if action.kind is ActionKind.STOP:
                if action.cause in (StopCause.NODE_LOST, StopCause.FAILED):
                    job.done = job.checkpointed  # killed: work since the last checkpoint is lost
                job.checkpointed = job.done
                job.allocation = EMPTY
                continue
            if action.kind is ActionKind.RESTART:
                job.done = job.checkpointed
            job.checkpointed = job.done
            job.allocation = action.allocation
            delay = self.config.restart_delay if job.started_once else self.config.start_delay
            job.started_once = True
            self._push(now + delay, "ready", action.job_id, job.version)

    def wait(self, timeout: float | None) -> list[Event]:
        now = self.clock.now()
        deadline = None if timeout is None else now + timeout
        while self._heap:
            head = self._heap[0]
            if deadline is not None and head.time > deadline:
                break
            if self._stale(head):
                heapq.heappop(self._heap)
                continue
            t = head.time
            self.clock.advance_to(t)
            events: list[Event] = []
            while self._heap and self._heap[0].time == t:
                item = heapq.heappop(self._heap)
                if not self._stale(item):
                    self.events_processed += 1
                    events.extend(self._fire(item))
            if events:
                return events
            now = t
        if deadline is not None:
            self.clock.advance_to(max(deadline, self.clock.now()))
        return []

    # -- scenario controls -----------------------------------------------------
    def revoke(self, node: str, at: float) -> None:
        """Schedule a node's loss (a transient server revoked) at time `at`."""
        self._push(at, "node_lost", node)

    # -- internals -------------------------------------------------------------
    def _push(self, t: float, kind: str, job_id: str, version: int = 0, payload: object = None) -> None:
        heapq.heappush(self._heap, _Item(t, next(self._seq), kind, job_id, version, payload))

    def _stale(self, item: _Item) -> bool:
        if item.kind in ("arrive", "node_lost"):
            return False
        job = self._jobs.get(item.job_id)
        return job is None or job.version != item.version

    def _advance(self, job: _SimJob, now: float) -> None:
        if job.running:
            job.done = min(job.truth.total_steps, job.done + job.rate * (now - job.since))
            interval = job.spec.checkpoint_every
            if interval > 0 and now - job.since >= interval:
                job.checkpointed = job.done - job.rate * ((now - job.since) % interval)
        job.since = now

    def _report(self, job_id: str, job: _SimJob, now: float) -> Report:
        speed = job.rate
        if self.config.speed_noise:
            speed *= max(0.0, 1.0 + self._rng.gauss(0.0, self.config.speed_noise))
        loss = job.truth.loss(job.done)
        if loss is not None and self.config.loss_noise:
            loss *= max(0.0, 1.0 + self._rng.gauss(0.0, self.config.loss_noise))
        return Report(time=now, job_id=job_id, step=int(job.done), loss=loss, steps_per_s=speed,
                      allocation=job.allocation)

    def _fire(self, item: _Item) -> list[Event]:
        now = item.time
        if item.kind == "arrive":
            job = self._jobs[item.job_id]
            return [JobArrived(now, item.job_id, job.spec)]
        if item.kind == "node_lost":
            return [NodeLost(now, item.job_id)]
        job = self._jobs[item.job_id]
        if item.kind == "ready":
            self._advance(job, now)
            job.running = True
            job.rate = job.truth.steps_per_second(job.allocation, job.spec)
            out: list[Event] = [JobRunning(now, item.job_id, job.allocation), self._report(item.job_id, job, now)]
            self._schedule_next(item.job_id, job, now)
            return out
        self._advance(job, now)
        if item.kind == "finish":
            job.running = False
            job.version += 1
            return [JobFinished(now, item.job_id, succeeded=True, message="reached its target")]
        # "report"
        self._schedule_next(item.job_id, job, now)
        return [self._report(item.job_id, job, now)]

    def _schedule_next(self, job_id: str, job: _SimJob, now: float) -> None:
        remaining = job.truth.total_steps - job.done
        if remaining <= EPS:
            self._push(now, "finish", job_id, job.version)
            return
        if job.rate <= 0:
            return
        finish_at = now + remaining / job.rate
        interval = self.config.report_interval
        if interval is not None and now + interval < finish_at:
            self._push(now + interval, "report", job_id, job.version)
        else:
            self._push(finish_at, "finish", job_id, job.version)
