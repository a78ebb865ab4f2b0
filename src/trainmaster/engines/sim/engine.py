"""Discrete-event engine: a heap of (time, seq, event), seeded, reproducible to the bit.

Jobs progress at their ground-truth speed (from the workload's `JobTruth`);
a job whose allocation changes pays a checkpoint-restart delay. Jobs report
step, speed and loss as real ones do, so online models learn from reports only.
A job started at a batch the policy chose (`Action.batch`) whose truth models
the batch (`BatchTruth`: Pollux's statistical efficiency) trains at it: its
rate is the truth's at that batch, re-read at each epoch's end (it reports
then), and it reports that batch and its gradient statistics (goodput). A
resize to the same allocation with a new batch switches batch in place, with
no restart (as adaptdl's data loader does).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.clock import ManualClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import (
    Event,
    JobArrived,
    JobFinished,
    JobRunning,
    NodeAdded,
    NodeLost,
    Report,
    RevocationNotice,
    progress_report,
)
from trainmaster.core.job import JobSpec
from trainmaster.core.market import Market
from trainmaster.core.node import Node
from trainmaster.engines.base import Recovered
from trainmaster.engines.churn import Churn, Due
from trainmaster.workloads.base import BatchRun, BatchTruth, JobTruth, Workload

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
    run_start: float = 0.0  # when the current run began stepping (checkpoints fall every `checkpoint_every` after)
    run_base: float = 0.0  # steps done when the current run began
    running: bool = False
    version: int = 0  # bumped on every change; stale heap entries are skipped
    started_once: bool = False
    batch: int | None = None  # the global batch the policy chose at the last start or resize (None: its own)
    run: BatchRun | None = None  # the truth at that batch, while it runs at one


@dataclass
class SimConfig:
    restart_delay: float = 30.0  # checkpoint-restart cost of a resize, migration or resume
    start_delay: float = 0.0  # cost of the very first start
    report_interval: float | None = None  # seconds between progress reports (None: only at start)
    speed_noise: float = 0.0  # relative std-dev of reported speed
    loss_noise: float = 0.0  # relative std-dev of reported loss
    seed: int = 0
    # Seconds between scheduling rounds (None: event-driven). Pollux's simulator steps the cluster 60 s at a
    # time (`Cluster.step`, `--interval`): what happens inside a round (an arrival, a job's end, tasks up)
    # reaches the scheduler only at the round's end, stamped with when it happened. (A node lost inside a
    # round stops its jobs at the round's end: the peer models no revocations.)
    round: float | None = None


def _round_up(t: float, period: float) -> float:
    """The first multiple of `period` at or after `t` (a hair of float error does not push it a round on)."""
    return math.ceil(t / period - EPS) * period


# A heap entry: (time, seq, kind, key, version). `seq` breaks ties in push order and is
# unique, so tuples never compare past it; `key` is a job id (or a node name for
# "node_lost"); `version` must match the job's for the entry to be live.
_Item = tuple[float, int, str, str, int]
_ALWAYS_LIVE = frozenset({"arrive", "node_lost", "churn"})


class SimEngine:
    """An engine whose clock only moves from event to event."""

    def __init__(self, cluster: Cluster, workload: Workload, config: SimConfig | None = None,
                 market: Market | None = None, replace_delay: float | None = None) -> None:
        """`market` revokes transient nodes (notice, then loss); with `replace_delay`, each revoked node
        is replaced by a fresh one of its kind that many seconds after the loss (a managed instance group)."""
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
            self._heap.append((wj.submit_time, next(self._seq), "arrive", wj.job_id, 0))
        heapq.heapify(self._heap)
        self.market = market
        self.work_lost: dict[str, float] = {}  # job id -> GPU-seconds of work lost to kills (since the checkpoint)
        self.steps_lost: dict[str, float] = {}  # job id -> steps lost to kills
        self.churn = Churn(market, replace_delay)  # boots, revocations, replacements (shared with real engines)
        self.churn.start(cluster.nodes, 0.0)
        self._churn_at = math.inf  # the earliest "churn" entry in the heap
        self._sync_churn()

    @property
    def revoked(self) -> list[tuple[float, str, str]]:
        """(time lost, node, reason) of each market revocation."""
        return self.churn.revocations

    # -- engine protocol -----------------------------------------------------
    def recover(self) -> Mapping[str, Recovered]:
        return {}  # a simulation starts from nothing

    def close(self) -> None:
        """Nothing runs outside this process."""

    def log_tasks(self, job_id: str) -> list[str]:
        return []  # a simulated job runs no process: it writes no log

    def logs(self, job_id: str, task: str | None = None, *, follow: bool = False, tail: int | None = None,
             done: Callable[[], bool] | None = None, poll: float = 0.25) -> Iterator[str]:
        return iter(())

    def cluster(self) -> Cluster:
        return self._cluster

    def idle(self) -> bool:
        heap = self._heap
        while heap and self._stale(heap[0]):  # superseded entries (a preempted job's finish) are no events
            heapq.heappop(heap)
        # Revocations and availability rows to come change nothing once no job is left; a booting node may.
        return self.churn.quiet() and all(item[2] == "churn" or self._stale(item) for item in heap)

    def apply(self, actions: Sequence[Action]) -> None:
        now = self.clock.now()
        for action in actions:
            job = self._jobs[action.job_id]
            self._advance(job, now)
            if (action.kind is ActionKind.RESIZE and job.running and action.batch is not None
                    and action.allocation == job.allocation and isinstance(job.truth, BatchTruth)):
                # Only the batch changes: the job switches in place (adaptdl's data loader), no restart.
                job.version += 1
                job.batch = action.batch
                self._push(now, "ready", action.job_id, job.version)
                continue
            job.version += 1
            job.running = False
            if action.kind is ActionKind.STOP:
                if action.cause in (StopCause.NODE_LOST, StopCause.FAILED):
                    self._count_lost(action.job_id, job)
                    job.done = job.checkpointed  # killed: work since the last checkpoint is lost
                job.checkpointed = job.done
                job.allocation = EMPTY
                continue
            if action.spec.checkpoint_every != job.spec.checkpoint_every:  # the controller's Young/Daly interval
                job.spec = replace(job.spec, checkpoint_every=action.spec.checkpoint_every)
            if action.kind is ActionKind.RESTART:
                job.done = job.checkpointed
            job.checkpointed = job.done
            job.allocation = action.allocation
            if action.batch is not None:
                job.batch = action.batch
            delay = self.config.restart_delay if job.started_once else self.config.start_delay
            job.started_once = True
            self._push(now + delay, "ready", action.job_id, job.version)

    def wait(self, timeout: float | None) -> list[Event]:
        return self.wait_reports(timeout, None, None)

    @property
    def hands_reports(self) -> bool:
        """Whether a caller may take `wait_reports`' bulk path: not where a subclass or the instance itself
        overrides `wait` to see every event it returns (a recording or fault-injecting engine in tests); asked at
        every step, since such a `wait` may be put in after the controller was built."""
        return type(self).wait is SimEngine.wait and "wait" not in self.__dict__

    def wait_reports(self, timeout: float | None, interval: float | None,
                     on_report: Callable[[Report], bool] | None) -> list[Event]:
        """`wait`, with the times whose events are all progress reports handed to `on_report` in bulk.

        Each such report goes to `on_report` as it fires, and the wait goes on, its deadline re-derived
        from that time as the caller's next `wait` would have it: `t + interval` (None: no deadline). The
        caller guarantees that a time of reports alone changes nothing its timeout is made of, unless
        `on_report` answers True (a decision is due): the wait then ends after that time's other events.
        Events at one time after a non-report one (an arrival, a finish) are returned as `wait` returns
        them, in order, to be handled in order. Without `on_report`, or with rounds (`SimConfig.round`), this
        is plain `wait`: every time's events are returned.
        """
        if self.config.round:
            return self._wait_round(timeout, self.config.round)
        heap, pop, fire, stale, progress = self._heap, heapq.heappop, self._fire, self._stale, self._progress
        advance = self.clock.advance_to
        deadline = None if timeout is None else self.clock.now() + timeout
        while heap:
            item = heap[0]
            t = item[0]
            if deadline is not None and t > deadline:
                break
            if stale(item):
                pop(heap)
                continue
            advance(t)
            pop(heap)
            self.events_processed += 1
            if item[2] != "report" or on_report is None:  # (a time that starts with another event: returned)
                events: list[Event] = fire(item)
                while heap and heap[0][0] == t:
                    item = pop(heap)
                    if not stale(item):
                        self.events_processed += 1
                        events.extend(fire(item))
                if events:
                    return events
                continue
            due = on_report(progress(item[3], t))
            events = []
            while heap and heap[0][0] == t:
                item = pop(heap)
                if stale(item):
                    continue
                self.events_processed += 1
                if item[2] == "report" and not events:
                    due = on_report(progress(item[3], t)) or due
                else:
                    events.extend(fire(item))
            if events or due:
                return events
            deadline = None if interval is None else t + interval  # (the caller's next timeout, from now)
        if deadline is not None:
            advance(max(deadline, self.clock.now()))
        return []

    def _wait_round(self, timeout: float | None, period: float) -> list[Event]:
        """`wait` in rounds: fire what falls inside the next round at its own time, return it at the round's end.

        Jobs progress, start and finish at their true times (the engine's state is
        exact); only the scheduler's view is held to round ends, so decisions,
        and the wake-ups a policy asks for, happen on multiples of `period`.
        """
        heap = self._heap
        deadline = None if timeout is None else _round_up(self.clock.now() + timeout, period)
        while True:
            while heap and self._stale(heap[0]):
                heapq.heappop(heap)
            if not heap:
                break
            end = _round_up(heap[0][0], period)
            if deadline is not None and end > deadline:
                break
            events: list[Event] = []
            while heap and heap[0][0] <= end:
                item = heapq.heappop(heap)
                if not self._stale(item):
                    self.clock.advance_to(item[0])
                    self.events_processed += 1
                    events.extend(self._fire(item))
            self.clock.advance_to(end)
            if events:
                return events
        if deadline is not None:
            self.clock.advance_to(max(deadline, self.clock.now()))
        return []

    def add_node(self, node: Node, at: float | None = None) -> None:
        """A node joins at `at` (default: now), e.g. once a provisioned machine has booted."""
        self.churn.boot(node, self.clock.now() if at is None else at)
        self._sync_churn()

    def remove_node(self, name: str) -> None:
        """A node leaves now; one still booting is just forgotten (it never joined)."""
        if not self.churn.cancel(name):
            self.revoke(name, self.clock.now())

    def nodes_and_booting(self) -> list[Node]:
        """The nodes in the simulated cluster now and those that will join (a provider's view of the market)."""
        return [*self._cluster.nodes, *self.churn.booting()]

    # -- scenario controls -----------------------------------------------------
    def revoke(self, node: str, at: float) -> None:
        """Schedule a node's loss (a transient server revoked) at time `at`."""
        self._push(at, "node_lost", node)

    # -- the market ---------------------------------------------------------------
    def _sync_churn(self) -> None:
        """Keep one heap entry at the churn agenda's next time (an earlier one already there covers it)."""
        at = self.churn.next_at()
        if at is not None and at < self._churn_at:
            self._churn_at = at
            self._push(at, "churn", "")

    def _churn(self, now: float) -> list[Event]:
        self._churn_at = math.inf
        out: list[Event] = []
        for change in self.churn.due(now, self._cluster.nodes):
            name = change.node.name
            if change.kind is Due.JOIN and name not in self._cluster:
                self._cluster = self._cluster.with_nodes((*self._cluster.nodes, change.node))
                out.append(NodeAdded(now, change.node))
            elif change.kind is Due.NOTICE and name in self._cluster:
                out.append(RevocationNotice(now, name, change.lost_at))
            elif change.kind is Due.LOSS and name in self._cluster:  # else released before its revocation came
                out.extend(self._lose(name, now))
                self.churn.lost(change, now)
        self._sync_churn()
        return out

    def _count_lost(self, job_id: str, job: _SimJob) -> None:
        lost = max(0.0, job.done - job.checkpointed)
        if lost > 0 and job.rate > 0:
            gpus = job.allocation.gpus(job.spec) or len(job.allocation)
            self.steps_lost[job_id] = self.steps_lost.get(job_id, 0.0) + lost
            self.work_lost[job_id] = self.work_lost.get(job_id, 0.0) + lost / job.rate * gpus

    def _lose(self, name: str, now: float) -> list[Event]:
        """A node leaves the simulated cluster."""
        if name not in self._cluster:
            return []  # gone already (released by a provider before its revocation came)
        self._cluster = self._cluster.with_nodes(n for n in self._cluster.nodes if n.name != name)
        return [NodeLost(now, name)]

    # -- internals -------------------------------------------------------------
    def _push(self, t: float, kind: str, key: str, version: int = 0) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, key, version))

    def _stale(self, item: _Item) -> bool:
        if item[2] in _ALWAYS_LIVE:
            return False
        job = self._jobs.get(item[3])
        return job is None or job.version != item[4]

    def _advance(self, job: _SimJob, now: float) -> None:
        """Bring `done` (and the last periodic checkpoint) up to `now`; the speed is constant within a run."""
        if job.running:
            total = job.truth.total_steps
            job.done = min(total, job.done + job.rate * (now - job.since))
            every = job.spec.checkpoint_every
            elapsed = now - job.run_start
            if every > 0 and elapsed >= every:
                saved = job.run_base + job.rate * (elapsed // every) * every
                job.checkpointed = max(job.checkpointed, min(total, saved))
        job.since = now

    def _report(self, job_id: str, job: _SimJob, now: float) -> Report:
        speed = job.rate
        if self.config.speed_noise:
            speed *= max(0.0, 1.0 + self._rng.gauss(0.0, self.config.speed_noise))
        loss = job.truth.loss(job.done)
        if loss is not None and self.config.loss_noise:
            loss *= max(0.0, 1.0 + self._rng.gauss(0.0, self.config.loss_noise))
        run = job.run
        if run is None:
            return progress_report(now, job_id, int(job.done), loss, speed, job.allocation)
        # At a chosen batch the job reports optimizer steps/s at it; progress stays in base-batch steps.
        speed = run.steps_per_s * (speed / job.rate if job.rate > 0 else 1.0)
        return progress_report(now, job_id, int(job.done), loss, speed, job.allocation, run.batch, run.grad_sqr,
                               run.grad_var)

    def _set_rate(self, job: _SimJob, now: float) -> None:
        """The job's speed on its allocation, at its chosen batch where its truth models batches."""
        job.run = None
        if job.batch is not None and isinstance(job.truth, BatchTruth):
            job.run = job.truth.at_batch(job.allocation, job.batch, job.done)
            rate = job.run.rate
        else:
            rate = job.truth.steps_per_second(job.allocation, job.spec, self._cluster)
        if job.running and rate != job.rate:  # periodic checkpoints keep their times: rebase the run's origin
            job.run_base = job.done - rate * (now - job.run_start)
        job.rate = rate

    def _progress(self, key: str, now: float) -> Report:
        """A "report" entry fired: the job's progress brought up to `now`, its next entry pushed, its report."""
        job = self._jobs[key]
        self._advance(job, now)
        if job.run is not None and job.done >= job.run.until - 1e-9 * job.truth.total_steps:  # an epoch ended
            self._set_rate(job, now)
        self._schedule_next(key, job, now)
        return self._report(key, job, now)

    def _fire(self, item: _Item) -> list[Event]:
        now, _, kind, key, _ = item
        if kind == "report":  # (most events: asked first)
            return [self._progress(key, now)]
        if kind == "arrive":
            return [JobArrived(now, key, self._jobs[key].spec)]
        if kind == "node_lost":
            return self._lose(key, now)
        if kind == "churn":
            return self._churn(now)
        job = self._jobs[key]
        if kind == "ready":
            self._advance(job, now)
            job.running = True
            job.run_start, job.run_base = now, job.done
            self._set_rate(job, now)
            out: list[Event] = [JobRunning(now, key, job.allocation), self._report(key, job, now)]
            self._schedule_next(key, job, now)
            return out
        # "finish"
        self._advance(job, now)
        job.running = False
        job.version += 1
        return [JobFinished(now, key, succeeded=True, message="reached its target")]

    def _schedule_next(self, job_id: str, job: _SimJob, now: float) -> None:
        remaining = job.truth.total_steps - job.done
        if remaining <= EPS:
            self._push(now, "finish", job_id, job.version)
            return
        if job.rate <= 0:
            return
        finish_at = now + remaining / job.rate
        interval = self.config.report_interval
        report_at = math.inf if interval is None else now + interval
        if job.run is not None and job.run.until < job.truth.total_steps:
            report_at = min(report_at, now + max(job.run.until - job.done, 0.0) / job.rate)
        if report_at < finish_at:
            self._push(report_at, "report", job_id, job.version)
        else:
            self._push(finish_at, "finish", job_id, job.version)
