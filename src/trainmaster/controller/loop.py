"""The controller: applies engine events to job records, runs the policy, sends actions.

One controller drives every engine; the clock is the engine's. There is no
simulate flag: the simulator is just an engine with a virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain, compress, filterfalse
from operator import eq, ne
from types import MappingProxyType

from trainmaster.controller.checkpointing import CheckpointTuner
from trainmaster.controller.diff import diff
from trainmaster.controller.learning import attach_learning
from trainmaster.controller.metrics import JobOutcome, Summary, UsageListener, UsageTimeline, summarize
from trainmaster.controller.notes import NoteStreams, Said
from trainmaster.controller.records import JobRecord, ServiceClock
from trainmaster.controller.views import Book
from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.cost import CostMeter
from trainmaster.core.errors import TrainmasterError
from trainmaster.core.events import (
    Event,
    JobArrived,
    JobFinished,
    JobRunning,
    JobStopped,
    NodeAdded,
    NodeLost,
    Report,
    RevocationNotice,
    TaskFailed,
)
from trainmaster.core.job import JobSpec
from trainmaster.core.queue import QueueSpec
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.base import BulkReports, Engine
from trainmaster.models.book import JobModel
from trainmaster.policies.snapshot import Behind, JobView, Lined, PendingIds, Plan, Policy, Snapshot, Tail

Listener = Callable[[str, JobRecord], None]
CycleHook = Callable[[Snapshot, Plan], None]  # runs after each decision's actions (the autoscaler)
Waker = Callable[[], float | None]  # a time the loop must wake at even without events (None: no need)
ReportSink = Callable[[Report, JobRecord], None]  # e.g. online model fitting; may write `models`


_QUIET = frozenset({"report", "running"})  # what `_emit` reports without requiring a new decision
RESTART_BACKOFF = (1.0, 300.0)  # seconds before the first restart after a failure, and the cap as it doubles


class CapacityExceeded(AssertionError):
    """Raised in checking mode when the live allocations overfill a node."""


class Controller:
    """Events -> snapshot -> policy -> plan -> actions -> engine."""

    def __init__(self, engine: Engine, policy: Policy, *, damping: float = 0.0, check: bool = False,
                 queues: Mapping[str, QueueSpec] | None = None,
                 backoff: tuple[float, float] = RESTART_BACKOFF) -> None:
        self.engine = engine
        self.policy = policy
        self.clock = engine.clock
        self.cluster: Cluster = engine.cluster()
        self.damping = damping
        self.check = check  # verify capacity and gang invariants after every change (tests)
        self.jobs: dict[str, JobRecord] = {}
        self.live: dict[str, JobRecord] = {}
        self.free: dict[str, Resources] = {n.name: n.capacity for n in self.cluster.nodes}
        self.free_total: Resources = self.cluster.total  # sum of `free`, kept exact alongside it
        # Views cached across decisions in `live` order; `_stale` holds the ids whose record changed since.
        # (Books: each snapshot gets a frozen copy that costs what changed, not one entry per live job.)
        self._views: Book[JobView] = Book()
        self._stale: dict[str, None] = {}
        self._held: dict[str, Allocation] = {}  # job id -> allocation of every live job holding resources
        self._pending: Book[None] = Book()  # ids of the live jobs holding nothing
        self._top = 0  # the highest `_position` given yet (see `submit`)
        # The policy looks up few jobs per decision (`Policy.reads_few_jobs`): its snapshots' jobs are frozen
        # books; any other gets a plain dict (lookups at C speed, one copy per decision).
        self._few = policy.reads_few_jobs is True
        self._pending_sorted = True  # `_pending` is in `_position` order (see `_pending_ids`)
        self._position: dict[str, int] = {}  # live job id -> when it entered `live` (orders `pending_ids`)
        self._touched: set[str] = set()  # ids that joined or left `_pending` since the last snapshot
        self._version = 0  # snapshots taken (`PendingIds.version`)
        self._origin = object()  # this controller's snapshots (`PendingIds.origin`)
        # job id -> the reason a decision last noted on its record, while that is still its latest note
        self._said = Said()
        # The (origin, version) of the last plan whose reasons were `Lined` (None after any other plan): its
        # policy's next plan may list only the jobs whose reasons changed since (`Lined.changed`).
        self._lined_seen: tuple[object, int] | None = None
        self._notes = NoteStreams()  # reasons noted on many jobs at once, rendered into a record when read
        # After a decision whose plan had a tail (`snapshot.Tail`): (snapshot version, head's key, never-fits
        # verdicts, tail stream's length, the plan's own reasons' ids); None after any other decision.
        self._tail_seen: tuple[int, tuple[float, str], object, int, tuple[str, ...]] | None = None
        # Jobs backing off after a failure, out of every decision until their `retry_at` (Kueue's requeue backoff).
        self.parked: dict[str, JobRecord] = {}
        self.backoff = backoff  # (first delay, cap) in seconds; doubles per restart
        self._service_clock = ServiceClock()
        self.usage = UsageTimeline(capacity=self.cluster.total.gpu)
        self.usage_listeners: list[UsageListener] = [self.usage]  # told of every allocation and capacity change
        self.used_gpus = 0
        self.models: dict[str, JobModel] = {}
        self.queues: dict[str, QueueSpec] = dict(queues or {})  # empty: one implicit queue
        self.listeners: list[Listener] = []
        self.report_sinks: list[ReportSink] = []
        self.before_snapshot: list[Callable[[], None]] = []  # e.g. learning's deferred model refreshes
        self.models_view: Callable[[], Mapping[str, JobModel]] | None = None  # a snapshot's models (else `models`)
        self.last_plan = Plan(allocations={})
        self.cycles = 0
        self.last_cycle_at = float("-inf")
        self.after_cycle: list[CycleHook] = []
        self.wakers: list[Waker] = []
        self.may_fit_later: list[Callable[[JobSpec], bool]] = []  # a job one of these accepts is never rejected
        self.cost = CostMeter()  # dollars and GPU-hours by the second (core.cost has the rules)
        self._service_clock.meter = self.cost  # views read each job's bill from it (`JobView.spent`)
        self.revocations = 0  # revocation notices the market sent
        self.draining: set[str] = set()  # nodes under a revocation notice: out of the policy's view, still paid
        self.drain_on_notice = True  # stop (checkpoint) a notified node's jobs at once rather than lose work
        for node in self.cluster.nodes:
            self.cost.node_joined(node, self.clock.now())
        self._dirty = True
        # The engine's bulk wait for quiet reports (`BulkReports`: the sim's), else None; `bulk_reports = False`
        # returns to `step` after every event (the reference).
        self._bulk = engine if isinstance(engine, BulkReports) else None
        self.bulk_reports = True
        self.checkpointing = CheckpointTuner(self.cluster, self.clock.now())  # Young/Daly for open intervals
        if policy.uses_models:  # model-driven policies (optimus) learn online from reports
            attach_learning(self)

    # -- inputs ------------------------------------------------------------
    def submit(self, spec: JobSpec, job_id: str | None = None, at: float | None = None) -> str:
        """Accept a job; returns its id. Ids are unique: the name, suffixed when taken."""
        jid = job_id or spec.name
        if jid in self.jobs:
            if job_id is not None:
                raise TrainmasterError(f"job id {jid!r} already exists; choose another name")
            n = 1
            while f"{spec.name}-{n}" in self.jobs:
                n += 1
            jid = f"{spec.name}-{n}"
        now = self.clock.now() if at is None else at
        record = JobRecord(id=jid, spec=spec, submit_time=now, since=now)
        record.note(now, "submitted")
        if self.queues and spec.queue not in self.queues:
            self.jobs[jid] = record
            self._finish(record, JobState.REJECTED, now,
                         f"unknown queue {spec.queue!r}; use one of {', '.join(sorted(self.queues))}")
            return jid
        self.jobs[jid] = record
        self.live[jid] = record
        self._views[jid] = record.live_view(self._service_clock)
        record.watch = self._stale
        record.said = self._said
        record.lazy = self._notes
        if self._top > len(self.jobs):  # (ids withdrawn meanwhile: a pending job may come after this one)
            self._pending_sorted = False
        self._pending[jid] = None
        self._touched.add(jid)
        self._position[jid] = len(self.jobs)
        self._top = max(self._top, len(self.jobs))
        self._dirty = True
        self._emit("submitted", record)
        return jid

    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> None:
        record = self.jobs[job_id]
        if record.state.terminal:
            return
        if record.state.active:
            self.engine.apply([Action(ActionKind.STOP, job_id, record.spec, EMPTY, reason, StopCause.CANCEL)])
        self._finish(record, JobState.CANCELLED, self.clock.now(), reason)

    # -- held and dependent jobs (the daemon's gate), live updates ------------------------------
    def withdraw(self, job_id: str) -> JobRecord:
        """Take a pending job out of scheduling (held, or waiting on a dependency); `submit` brings it back."""
        record = self.live.get(job_id) or self.parked.get(job_id)
        if record is None or record.state is not JobState.PENDING or record.allocation:
            raise TrainmasterError(f"job {job_id} is not pending; only a pending job can be held")
        for book in (self.jobs, self.live, self.parked, self._views, self._pending, self._position, self._stale):
            book.pop(job_id, None)  # type: ignore[attr-defined]
        self._touched.add(job_id)
        record.settle()
        record.watch = record.lazy = None
        self._said.drop(job_id)
        self._dirty = True
        return record

    def update(self, job_id: str, spec: JobSpec) -> None:
        """Swap a live job's spec (priority, replica range): the next decision uses it."""
        self.jobs[job_id].spec = spec  # marks its cached view stale
        self._dirty = True

    # -- the loop ----------------------------------------------------------
    def run(self, max_cycles: int | None = None) -> None:
        """Run until every job has ended and the engine is idle."""
        self.cycle()
        while self.live or self.parked or not self.engine.idle():
            if max_cycles is not None and self.cycles >= max_cycles:
                break
            if not self.step():
                break

    def step(self, max_wait: float | None = None) -> bool:
        """Wait for events (or the policy's interval), apply them, decide. False when nothing can happen.

        `max_wait` caps the wait so a real-time driver (the daemon) regains control
        often to take commands; it then decides only when something changed or the
        policy's interval has passed since the last decision.
        """
        wake = self.last_plan.wake_after  # the policy's own wake-up time (tiresias), else its interval
        interval = (wake if wake is not None else self.policy.interval) if self.live else None
        timeout = interval if max_wait is None else min(max_wait, interval or max_wait)
        if self.parked:  # wake up for the first job whose backoff ends
            until = max(0.0, min(r.retry_at or 0.0 for r in self.parked.values()) - self.clock.now())
            timeout = until if timeout is None else min(timeout, until)
        woken = [at for at in (waker() for waker in self.wakers) if at is not None] if self.wakers else []
        if woken:  # next idle check: a decision is due then even if nothing else happens
            until = max(0.0, min(woken) - self.clock.now())
            timeout = until if timeout is None else min(timeout, until)
        engine = self._bulk if self.bulk_reports and max_wait is None else None
        bulk = engine.wait_reports if engine is not None and engine.hands_reports else None
        if bulk is not None and not (self.parked or self.wakers or self._dirty):
            # Quiet reports in bulk: each time of reports alone is handled inside the wait (`_report`), which
            # goes on to `now + interval` as the next call's would -- nothing above moves on a quiet event
            # (not `last_plan`, `live`, `parked`, `wakers`). A report that makes a decision due ends it.
            events = bulk(timeout, interval, self._report)
            if not events and timeout is None and not self._dirty and self.engine.idle():
                return False
        else:
            events = self.engine.wait(timeout)
            if not events and timeout is None and self.engine.idle():
                return False
        for event in events:
            self.handle(event)
        if self.parked:
            self._unpark(self.clock.now())
        if max_wait is not None:
            due = (interval is not None and self.clock.now() - self.last_cycle_at >= interval) \
                or (bool(woken) and self.clock.now() >= min(woken))
            if not (self._dirty or due):
                return True
        elif events and not self._dirty:
            return True
        self.cycle()
        return True

    def cycle(self) -> Plan:
        """Phases 1-6: snapshot, policy (admit, size, place, preempt/backfill), diff, act."""
        self.cycles += 1
        snap = self.snapshot()  # 1. snapshot
        self.last_cycle_at = snap.now
        plan = self.policy.decide(snap)  # 2-5. the policy's phases
        actions = self.checkpointing.tune(diff(snap, plan, damping=self.damping), self.cluster, snap.now)  # 6. diff
        self.last_plan = plan
        now = snap.now
        for jid, reason in plan.rejected.items():
            record = self.jobs[jid]
            if record.state is JobState.PENDING:
                if any(fits(record.spec) for fits in self.may_fit_later):
                    text = f"waits for nodes that can still join: {reason}"  # (autoscaler, replacements)
                    if not record.decisions or record.decisions[-1][1] != text:
                        record.note(now, text)
                    continue
                self._finish(record, JobState.REJECTED, now, reason)
        reasons = plan.reasons
        tail = reasons.tail if isinstance(reasons, Behind) else None
        text = ""
        if isinstance(reasons, Behind):  # the jobs behind the head as one segment (`_note_tail`); others one by one
            text, reasons = reasons.value, reasons.own
            for action in actions:  # noted by `_commit` below: out of the shared streams first
                self.jobs[action.job_id].settle()
        # Only reasons that differ from what an earlier decision noted (C-level passes: thousands
        # of waiting jobs keep their reason from one decision to the next). `note` from anywhere else
        # drops the job from `said`, so its reason is checked again here.
        said = self._said
        dropped = said.take_dropped()
        lined = reasons if isinstance(reasons, Lined) else None
        if lined is not None and lined.changed is not None and lined.base == self._lined_seen:
            # The jobs whose reasons changed since the last plan, and those noted from elsewhere since.
            new = lined.changed
            changed = dict(compress(new.items(), map(ne, new.values(), map(said.get, new))))
            for jid in dropped:
                noted = lined.get(jid)
                if noted is not None and said.get(jid) != noted:
                    changed[jid] = noted
        else:
            if lined is not None:
                reasons = lined.full()  # (a plain dict: C-level passes below)
            if len(reasons) > 64 and not any(map(eq, reasons.values(), map(said.get, reasons))):
                changed = dict(reasons)  # every reason is new (a new head: the whole line behind it)
            else:
                changed = dict(compress(reasons.items(), map(ne, reasons.values(), map(said.get, reasons))))
        self._lined_seen = lined.stamp if lined is not None else None
        if changed:
            if tail is None:
                for action in actions:  # noted by `_commit` below: out of the shared streams first
                    self.jobs[action.job_id].settle()
            self._note_reasons(changed, plan.rejected, now)
        if tail is not None:
            self._note_tail(tail, text, snap, reasons, now)
        else:
            self._tail_seen = None
        for action in actions:
            self._commit(action, now)
        if actions:
            self.engine.apply(actions)
        self._dirty = False  # what this decision did (starts, stops, rejections) needs no new decision
        for hook in self.after_cycle:  # what a hook does (the autoscaler moving jobs off a node) may need one
            hook(snap, plan)
        if self.check:
            self.verify()
        return plan

    def _note_reasons(self, new: dict[str, str], rejected: Mapping[str, str], now: float) -> None:
        """Note each job's new reason, lazily (`notes.NoteStreams`): when a head of the line starts, every
        job behind it gets a new reason at once, one stream entry rather than a Python step per record."""
        said, live = self._said, self.live
        # One in `said` is live, not rejected, and its latest note is another reason; check only the others.
        for jid in list(filterfalse(said.__contains__, new)):
            record = live.get(jid)
            if record is None or jid in rejected:
                del new[jid]
            elif record.why == new[jid] and record.decisions and record.decisions[-1][1] == new[jid]:
                said[jid] = new.pop(jid)  # (noting an unchanged reason again would change nothing)
        said.update(new)
        self._notes.note(self._notes.group(new), self.jobs, now)

    def _note_tail(self, tail: Tail, text: str, snap: Snapshot, own: Mapping[str, str], now: float) -> None:
        """Note `text` on every job of the plan's tail: the tail stream moves on (one entry) and only the jobs
        new to it join, when the previous decision had a tail too and nothing broke the chain in between
        (else the tail's jobs follow a new stream: a step per job, once).

        The tail stream's jobs are exactly the previous tail's, less those that left it since (every one is
        settled on its way out: `NoteStreams.left`): a job of this tail that does not follow the stream joined
        the line since (the snapshot's journal), left the stream, or had a reason of its own in the last
        plan -- unless the head moved back in line or the cluster changed, which start a new stream.
        """
        notes, said, pending, seen = self._notes, self._said, snap.pending_ids, self._tail_seen
        stream = notes.tail
        self._tail_seen = None
        fresh = True
        joining: list[str] = []
        if (seen is not None and stream is not None and isinstance(pending, PendingIds)
                and pending.origin is self._origin and pending.version == seen[0] + 1 and tail.key >= seen[1]
                and tail.never is seen[2] and len(stream.log) == seen[3]):
            of = notes.of
            joining = [jid for jid in dict.fromkeys(chain(pending.joined, notes.left, seen[4]))
                       if of.get(jid) is not stream and jid in tail]
            fresh = stream.count + len(joining) != tail.size  # (cannot happen: then a new stream, to be safe)
        if fresh:
            joining = tail.members()
        for jid in joining:
            said.drop(jid)  # its latest decision's reason is the stream's
        notes.follow_tail(text, joining, self.jobs, now, fresh=fresh)
        assert notes.tail is not None
        if isinstance(pending, PendingIds) and pending.origin is self._origin:
            self._tail_seen = (pending.version, tail.key, tail.never, len(notes.tail.log), tuple(own))

    def snapshot(self) -> Snapshot:
        for hook in self.before_snapshot:
            hook()
        now = self.clock.now()
        self._service_clock.now = now
        views, clock = self._views, self._service_clock
        changed: frozenset[str] | None = frozenset(self._stale)  # (views rebuilt since the last snapshot)
        if len(views) != len(self.live):  # out of step (cannot happen through this class): rebuild
            views.reset({jid: record.live_view(clock) for jid, record in self.live.items()})
            changed = None  # (any)
        elif self._stale:
            for jid in self._stale:
                record = self.live.get(jid)
                if record is not None:
                    views[jid] = record.live_view(clock)  # an existing key: keeps its place
        self._stale.clear()
        return Snapshot(
            now=now,
            cluster=self.cluster,
            jobs=views.frozen() if self._few else MappingProxyType(views.folded()),
            free=MappingProxyType(dict(self.free)),
            free_total=self.free_total,
            held=MappingProxyType(dict(self._held)),
            pending_ids=self._pending_ids(changed),
            models=MappingProxyType(dict(self.models)) if self.models_view is None else self.models_view(),
            queues=MappingProxyType(dict(self.queues)),
        )

    def _pending_ids(self, changed: frozenset[str] | None = None) -> PendingIds:
        """The pending ids in `_position` order, with those that joined or left since the last snapshot.
        Arrivals append in that order; only a job that goes back to pending (preempted, failed, backoff
        over) makes `_pending` sort again, once."""
        if not self._pending_sorted:
            self._pending.reset(dict.fromkeys(sorted(self._pending.keys(), key=self._position.__getitem__)))
            self._pending_sorted = True
        pending, touched = self._pending, self._touched
        joined = frozenset(filter(pending.__contains__, touched))
        self._version += 1
        ids = PendingIds(pending.frozen(), self._origin, self._version, joined, frozenset(touched - joined), changed)
        touched.clear()
        return ids

    # -- bookkeeping -------------------------------------------------------
    def _hold(self, record: JobRecord, alloc: Allocation, now: float, *, ending: bool = False) -> None:
        """Swap the resources a job holds, keeping free capacity and GPU usage exact (`ending`: it ends, so
        holding nothing does not put it back in line)."""
        for node, res in record.allocation.per_node(record.spec).items():
            if node in self.free:
                self.free[node] = self.free[node] + res
                self.free_total = self.free_total + res
        self.used_gpus -= record.gpus_held
        record.set_allocation(alloc, now)
        self.cost.hold(record.id, alloc.per_node(record.spec), now)
        for node, res in alloc.per_node(record.spec).items():
            self.free[node] = self.free[node] - res
            self.free_total = self.free_total - res
        self.used_gpus += record.gpus_held
        if alloc:
            self._held[record.id] = alloc
            if record.id in self._pending:
                del self._pending[record.id]
                self._touched.add(record.id)
        elif self._held.pop(record.id, None) is not None and record.id in self.live and not ending:
            self._pending[record.id] = None
            self._touched.add(record.id)
            self._pending_sorted = False  # back in line at its old place
        for listener in self.usage_listeners:
            listener.allocated(now, record, self.used_gpus)

    def _commit(self, action: Action, now: float) -> None:
        record = self.jobs[action.job_id]
        if action.kind is ActionKind.STOP:
            self._release(record, now, StopCause.PREEMPT, action.reason)
            return
        if action.kind is ActionKind.RESIZE:
            record.resizes += 1
        self._hold(record, action.allocation, now)
        if record.first_start is None:
            record.first_start = now
        record.running_since = now
        record.move(JobState.STARTING, now, action.reason)
        record.note(now, f"{action.kind.value}: {action.allocation.describe()} ({action.reason})")
        self._emit(action.kind.value, record)

    def _release(self, record: JobRecord, now: float, cause: StopCause, reason: str) -> None:
        """An active job gives back what it holds and waits again; the one place a stop is booked.

        A preemption counts as one, a failure or a lost node as a restart (against maxRestarts).
        """
        self._hold(record, EMPTY, now)
        record.running_since = None
        if cause in (StopCause.PREEMPT, StopCause.REVOKED):  # not a failure: counts against no limit
            record.preemptions += 1
            record.move(JobState.PENDING, now, reason)
            record.note(now, f"preempted: {reason}")
            self._emit("preempted", record)
            return
        record.restarts += 1
        record.move(JobState.PENDING, now, reason if cause is StopCause.NODE_LOST else f"task failed: {reason}")
        if cause is StopCause.NODE_LOST:
            record.note(now, f"{reason}; waiting to be placed again")

    def _finish(self, record: JobRecord, state: JobState, now: float, reason: str) -> None:
        if record.allocation:
            self._hold(record, EMPTY, now, ending=True)
        record.move(state, now, reason)
        record.finish_time = now
        record.message = reason
        record.note(now, reason)
        self.live.pop(record.id, None)
        self.parked.pop(record.id, None)
        self._views.pop(record.id, None)
        self._pending.pop(record.id, None)
        self._touched.add(record.id)
        self._position.pop(record.id, None)
        self._dirty = True
        self._emit(state.value, record)

    def handle(self, event: Event) -> None:
        """Apply one engine event to the job records."""
        if type(event) is Report:  # (most events: ahead of the match's class tests)
            self._report(event)
            return
        match event:
            case JobArrived(time=t, job_id=jid, spec=spec):
                self.submit(spec, jid, at=t)
            case JobRunning(time=t, job_id=jid, allocation=alloc):
                record = self.live.get(jid)
                if record and record.state is JobState.STARTING and record.allocation == alloc:
                    record.move(JobState.RUNNING, t, "all tasks running")
                    record.last_checkpoint = t
                    self._emit("running", record)
            case Report() as report:
                self._report(report)
            case JobStopped(time=t, job_id=jid, step=step):
                record = self.jobs.get(jid)
                if record and step is not None:
                    record.step = step
                    record.last_checkpoint = t
            case JobFinished(time=t, job_id=jid, succeeded=ok, message=msg):
                record = self.live.get(jid)
                if record:
                    self._finish(record, JobState.SUCCEEDED if ok else JobState.FAILED, t,
                                 msg or ("finished" if ok else "failed"))
            case TaskFailed(time=t, job_id=jid, message=msg):
                self._task_failed(jid, t, msg)
            case NodeLost(time=t, node=name):
                self._node_lost(name, t)
            case RevocationNotice(time=t, node=name, lost_at=lost_at):
                self.revocations += 1
                self._drain(name, t, lost_at)
            case NodeAdded(time=t, node=node):
                if node.name not in self.cluster:
                    self.cost.node_joined(node, t)
                    self.checkpointing.joined(node, t)
                    self.cluster = self.cluster.with_nodes((*self.cluster.nodes, node))
                    self.free[node.name] = node.capacity
                    self.free_total = self.free_total + node.capacity
                    self._capacity_changed(t)
                    self._dirty = True

    def _report(self, report: Report) -> bool:
        """A live job's progress: its record, the report sinks, the listeners (no decision is due for it).
        Answers whether a decision is due now all the same (a sink or listener made one: the bulk wait's stop)."""
        record = self.live.get(report.job_id)
        if record:
            record.progressed(report.step, report.loss, report.steps_per_s)
            for sink in self.report_sinks:
                sink(report, record)
            for listener in self.listeners:  # (`_emit`'s, without its `_dirty` update: a report is quiet)
                listener("report", record)
        return self._dirty

    def _task_failed(self, jid: str, t: float, msg: str) -> None:
        """A task died: the gang is broken. Stop it, then restart from the checkpoint after a backoff."""
        record = self.live.get(jid)
        if record is None or not record.state.active:
            return
        self.engine.apply([Action(ActionKind.STOP, jid, record.spec, EMPTY, msg, StopCause.FAILED)])
        if record.restarts >= record.spec.max_restarts:
            self._finish(record, JobState.FAILED, t, f"failed after {record.restarts} restarts: {msg}")
            return
        self._release(record, t, StopCause.FAILED, msg)
        delay = min(self.backoff[1], self.backoff[0] * 2 ** (record.restarts - 1))
        record.retry_at = t + delay
        record.note(t, f"backing off {delay:g}s before restart {record.restarts}/{record.spec.max_restarts} "
                       f"from the checkpoint: {msg}")
        self._park(record)

    def _park(self, record: JobRecord) -> None:
        """Keep a backing-off job out of decisions (it holds nothing) until its `retry_at`."""
        self.parked[record.id] = record
        self.live.pop(record.id, None)
        self._views.pop(record.id, None)
        self._pending.pop(record.id, None)
        self._touched.add(record.id)
        self._dirty = True
        self._emit("backoff", record)

    def _unpark(self, now: float) -> None:
        for jid, record in list(self.parked.items()):
            if record.retry_at is not None and record.retry_at <= now:
                del self.parked[jid]
                record.retry_at = None
                self.live[jid] = record
                self._views[jid] = record.live_view(self._service_clock)
                self._pending[jid] = None
                self._touched.add(jid)
                self._pending_sorted = False
                record.note(now, "backoff over: waiting to restart from the checkpoint")
                self._dirty = True

    def _drain(self, name: str, t: float, lost_at: float) -> None:
        """A revocation notice: the node takes no new task, and with `drain_on_notice` its jobs stop now,
        checkpointing (SIGTERM), to be placed again on what is left, instead of losing their work at the loss."""
        if name not in self.cluster or name in self.draining:
            return
        reason = f"node {name} is revoked in {max(0.0, lost_at - t):.0f}s (market notice)"
        hit = [r for r in self.live.values() if r.state.active and name in r.allocation.nodes]
        if not self.drain_on_notice:  # they run on until the loss kills them
            for record in hit:
                record.note(t, reason)
            return
        self.checkpointing.lost(self.cluster.node(name), t)  # a revocation: it sets the checkpoint rate
        self._vacate(name, t, reason, StopCause.REVOKED)

    def move_off(self, name: str, reason: str) -> None:
        """Take a node out of placement and stop its jobs gracefully (checkpoint) to be placed again on the
        rest: the autoscaler empties an underused node so that it can give it back. Paid until it leaves."""
        if name in self.cluster and name not in self.draining:
            self._vacate(name, self.clock.now(), reason, StopCause.PREEMPT)

    def _vacate(self, name: str, t: float, reason: str, cause: StopCause) -> None:
        self.draining.add(name)
        for record in [r for r in self.live.values() if r.state.active and name in r.allocation.nodes]:
            self.engine.apply([Action(ActionKind.STOP, record.id, record.spec, EMPTY, reason, cause)])
            self._release(record, t, cause, reason)
        self._remove(name, t)

    def _node_lost(self, name: str, t: float) -> None:
        if name in self.draining:  # drained at its notice: now it has gone, and stops costing
            self.draining.discard(name)
            self.cost.node_left(name, t)
        if name not in self.cluster:
            return
        self.checkpointing.lost(self.cluster.node(name), t)
        for record in list(self.live.values()):
            if record.state.active and name in record.allocation.nodes:
                self.engine.apply([Action(ActionKind.STOP, record.id, record.spec, EMPTY,
                                          f"node {name} lost", StopCause.NODE_LOST)])
                self._release(record, t, StopCause.NODE_LOST, f"node {name} lost")
        self._remove(name, t)
        self.cost.node_left(name, t)

    def _remove(self, name: str, t: float) -> None:
        """Take a node out of what the policy may place on (at `t`)."""
        self.cluster = self.cluster.with_nodes(n for n in self.cluster.nodes if n.name != name)
        self.free_total = self.free_total - self.free.pop(name, Resources())
        self._capacity_changed(t)
        self._dirty = True

    def _capacity_changed(self, t: float) -> None:
        for listener in self.usage_listeners:
            listener.capacity_changed(t, self.cluster.total.gpu)

    def _emit(self, what: str, record: JobRecord) -> None:
        # Reports, and a job's tasks coming up (starting -> running: it held the same resources
        # before), change nothing a policy decides on, so they do not call for a decision.
        self._dirty = self._dirty or what not in _QUIET
        for listener in self.listeners:
            listener(what, record)

    # -- checks and results --------------------------------------------------
    def verify(self) -> None:
        """Capacity is never exceeded and every active job holds at least its whole minimum gang."""
        used: dict[str, Resources] = {}
        for record in self.live.values():
            if not record.state.active:
                continue
            for role, spec in record.spec.roles.items():
                n = record.allocation.count(role)
                if n < spec.min or n > spec.max:
                    raise CapacityExceeded(f"job {record.id}: {n} {role.value} tasks outside [{spec.min}, {spec.max}]")
            for node, res in record.allocation.per_node(record.spec).items():
                used[node] = used.get(node, Resources()) + res
        for node, res in used.items():
            if node not in self.cluster or not res.fits_in(self.cluster.node(node).capacity):
                raise CapacityExceeded(f"node {node} overfilled: {res}")

    def outcomes(self) -> list[JobOutcome]:
        return [
            JobOutcome(r.id, r.submit_time, r.first_start, r.finish_time, r.state, r.restarts, r.spec.min_gpus,
                       r.resizes, r.preemptions)
            for r in self.jobs.values()
        ]

    def summary(self) -> Summary:
        return summarize(self.outcomes(), self.usage)
