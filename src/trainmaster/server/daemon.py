"""The controller on the real clock, in one thread, fed by the API through a command queue.

Only the daemon thread touches the Controller. API threads validate and commit
a job to the store, then queue a command; reads come from the store or from
views the daemon thread republishes after every step (plain immutable values,
swapped in whole). A daemon killed at any moment restarts from the store:
the engine first kills any task process the dead daemon left behind and
reads what each job's last attempt left (its tasks' exit codes). A job whose
workers all exited 0 while no daemon watched is recorded as succeeded and
never runs again; one whose task failed counts a restart; the rest go back
to the controller with their ids and submit times and resume from their
checkpoints. Nothing runs twice.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError, TrainmasterError
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.queue import QueueSpec
from trainmaster.core.runnable import check_runnable
from trainmaster.core.spec import job_from_mapping
from trainmaster.core.states import JobState
from trainmaster.engines.base import Engine, Outcome, Recovered
from trainmaster.policies.snapshot import Policy, Snapshot
from trainmaster.policies.workspace import never_fits
from trainmaster.server.gate import Conflict, Parked, Wait, wait_of
from trainmaster.server.store import Batch, Store

log = logging.getLogger("trainmaster.server")
T = TypeVar("T")
DEFAULT_QUEUE = "default"


def tasks_of(alloc: Allocation) -> list[tuple[str, int, str]]:
    """(role, index, node) per task: indices count up per role in the allocation's order."""
    seen: dict[Role, int] = {}
    out = []
    for t in alloc.tasks:
        out.append((t.role.value, seen.get(t.role, 0), t.node))
        seen[t.role] = seen.get(t.role, 0) + 1
    return out


class Daemon:
    """Owns the controller and its thread; the API calls `submit`, `cancel`, `call` and reads views."""

    def __init__(self, store: Store, engine: Engine, policy: Policy, *,
                 queues: Mapping[str, QueueSpec] | None = None, poll: float = 0.1) -> None:
        self.store = store
        self.engine = engine
        self.policy = policy
        self.poll = poll
        self.controller = Controller(engine, policy, queues=queues)
        self.queue_names = frozenset(self.controller.queues) or frozenset({DEFAULT_QUEUE})
        self.controller.listeners.append(self._on_change)
        self.controller.report_sinks.append(self._on_report)
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._batch = Batch()
        self._changed: set[str] = set()
        self._decided: dict[str, tuple[float, str]] = {}  # last decision written, per live job
        self._placed: dict[str, Allocation] = {}  # allocation last written to `tasks`, per live job
        self._stop = threading.Event()
        # Set once the server begins to shut down: open `logs?follow` streams end at their next poll, for the
        # web server waits for every open response before it exits (see serve.Server).
        self.closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.nodes_view: tuple[Mapping[str, Any], ...] = ()
        self.queues_view: tuple[Mapping[str, Any], ...] = ()
        self._recovering = False
        self._parked: dict[str, Parked] = {}  # held or dependent jobs kept out of the controller (server.gate)
        self._held: set[str] = set()
        self._logged_cycle = 0
        self._published_cluster: Cluster | None = None  # the cluster value the node view was built from
        self._cost_before: dict[str, float] = {}  # USD a recovered job spent under earlier daemons
        self.priced = any(n.price_per_hour > 0 for n in engine.cluster().nodes)

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Recover unfinished jobs from the store, then run the controller thread."""
        recovered = self.recover()
        self._regate()
        log.info("recovered", extra={"fields": {"jobs": recovered, "gated": len(self._parked)}})
        self._thread = threading.Thread(target=self._run, name="trainmaster-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop, then the engine's tasks (they checkpoint; the next start resumes them)."""
        self.closing.set()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.engine.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def recover(self) -> int:
        """Hand every unfinished job in the store back to the controller; returns how many."""
        ended = self.engine.recover()  # kills what a killed daemon left running, so nothing runs twice
        rows = self.store.unfinished()
        self._recovering = True
        try:
            for row in rows:
                self._recover_one(row, ended.get(row["id"]))
        finally:
            self._recovering = False
        self._flush()
        return len(rows)

    def _recover_one(self, row: dict[str, Any], ended: Recovered | None) -> None:
        c = self.controller
        now = c.clock.now()
        if ended is not None and ended.outcome is Outcome.SUCCEEDED:  # finished while no daemon watched
            self._batch.jobs[row["id"]] = {"state": JobState.SUCCEEDED.value, "finish_time": ended.ended_at or now,
                                           "step": row["step"] if ended.step is None else ended.step,
                                           "allocation": "", "gpus": 0, "tasks": 0,
                                           "message": f"finished while the daemon was down ({ended.detail})"}
            self._batch.tasks[row["id"]] = []
            self._batch.events.append((now, row["id"], "recovered", JobState.SUCCEEDED.value, "", 0, 0,
                                       ended.detail))
            log.info("recovery: job %s finished while the daemon was down (%s)", row["id"], ended.detail)
            return
        try:
            spec = job_from_mapping(row["doc"], submitted=row["submit_time"])
        except TrainmasterError as exc:  # accepted by an older build, invalid now
            self._batch.jobs[row["id"]] = {"state": JobState.FAILED.value, "finish_time": now,
                                           "message": f"cannot recover: {exc}"}
            return
        was_active = JobState(row["state"]).active
        failed = was_active and ended is not None and ended.outcome is Outcome.FAILED
        if failed and row["restarts"] >= spec.max_restarts:
            assert ended is not None
            self._batch.jobs[row["id"]] = {"state": JobState.FAILED.value, "finish_time": now,
                                           "message": f"failed after {row['restarts']} restarts: {ended.detail}"}
            return
        jid = c.submit(spec, row["id"], at=row["submit_time"])
        record = c.jobs[jid]
        self._changed.add(jid)
        if jid not in c.live:  # rejected on the way back in (its queue is gone from the configuration)
            return
        record.restarts = row["restarts"] + int(was_active)
        record.resizes = row["resizes"]
        record.preemptions = row["preemptions"]
        self._cost_before[jid] = row["cost"] or 0.0
        record.first_start = row["first_start"]
        record.step = row["step"]
        record.loss = row["loss"]
        if failed:
            assert ended is not None
            record.note(now, f"daemon restarted: a task failed while it was down ({ended.detail}); "
                             "restarting from the last checkpoint")
        else:
            record.note(now, "daemon restarted: resuming from the last checkpoint" if was_active
                        else "daemon restarted: waiting again")
        if row["cancel_requested"]:
            c.cancel(jid, "cancelled by the user")

    # -- commands from the API (any thread) -----------------------------------------
    def validate(self, doc: object) -> JobSpec:
        """Check a job document: the spec, its queue, that its command resolves, and that it could ever fit here."""
        spec = job_from_mapping(doc)
        base_dir = getattr(self.engine, "base_dir", None)  # engines that run commands here (local) have one
        if isinstance(base_dir, Path):
            check_runnable(spec, base_dir)
        if spec.queue not in self.queue_names:
            raise SpecError("metadata.queue", f"unknown queue {spec.queue!r}",
                            f"use one of {', '.join(sorted(self.queue_names))}")
        cluster = self.controller.cluster  # an immutable value; reading the reference is safe
        reason = never_fits(spec, Snapshot(now=0.0, cluster=cluster, jobs={}, free={}))
        if reason and not any(fits(spec) for fits in self.controller.may_fit_later):  # e.g. autoscaler offers
            raise SpecError("spec.roles", f"impossible resources: {reason}",
                            "ask for less per replica or fewer minimum replicas")
        for dep in spec.after:
            if self.store.job(dep) is None:
                raise SpecError("spec.after", f"no job {dep!r}",
                                "name jobs already submitted (see `trainmaster queue --all`)")
        return spec

    def submit(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Validate, commit to the store (durable from here on), then hand to the controller."""
        spec = self.validate(doc)
        row = self.store.add_job(doc, spec.name, spec.queue, spec.priority, self.controller.clock.now())
        self._commands.put(lambda: self._adopt(row["id"], spec, row["submit_time"]))
        return row

    def cancel(self, job_id: str) -> None:
        self.store.request_cancel(job_id)
        self._commands.put(lambda: self._cancel(job_id))

    def call(self, fn: Callable[[Controller], T], timeout: float = 10.0) -> T:
        """Run `fn(controller)` in the daemon thread and return its result.

        TimeoutError (the API's 503) when the thread does not take it within `timeout`, at once when the
        scheduler thread is not running (stopped, or not started).
        """
        if not self.alive:
            raise TimeoutError("the scheduler thread is not running")
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn(self.controller))
            except BaseException as exc:  # handed back to the caller's thread
                future.set_exception(exc)

        self._commands.put(run)
        return future.result(timeout)

    def _adopt(self, job_id: str, spec: JobSpec, at: float) -> None:
        if job_id not in self.controller.jobs and job_id not in self._parked:
            self._admit(job_id, Parked(spec, at))

    def _cancel(self, job_id: str) -> None:
        if job_id in self.controller.jobs:
            self.controller.cancel(job_id)
        elif job_id in self._parked:
            self._end_parked(job_id, "cancelled by the user")

    # -- hold / release / update / dependencies (server.gate) --------------------------------
    def hold(self, job_id: str) -> None:
        """Keep a pending job from starting until `release` (any thread; Conflict unless it is pending)."""
        self.call(lambda c: self._hold(job_id))

    def release(self, job_id: str) -> None:
        self.call(lambda c: self._release(job_id))

    def update(self, job_id: str, priority: int | None = None, max_workers: int | None = None) -> None:
        """Change a live job's priority or worker max, validated like a submitted document."""
        doc = self.store.doc(job_id)
        if doc is None:
            raise Conflict(f"no job {job_id!r}")
        if priority is not None:
            doc.setdefault("metadata", {})["priority"] = priority
        if max_workers is not None:
            doc.setdefault("spec", {}).setdefault("roles", {}).setdefault("worker", {})["max"] = max_workers
        spec = self.validate(doc)
        self.call(lambda c: self._update(job_id, spec))
        self.store.update_doc(job_id, doc, spec.priority)

    def gate_wait(self, job_id: str) -> Wait | None:
        """Why a gated job waits (None when the gate does not hold it); call it in the daemon thread."""
        parked = self._parked.get(job_id)
        return None if parked is None else wait_of(job_id in self._held, parked.spec, self._state_of)

    def _hold(self, job_id: str) -> None:
        record = self.controller.live.get(job_id) or self.controller.parked.get(job_id)  # (parked: backing off)
        if record is None and job_id not in self._parked:
            raise Conflict(f"job {job_id} has ended; only a pending job can be held")
        if record is not None and record.state is not JobState.PENDING:
            raise Conflict(f"job {job_id} is {record.state.value}; only a pending job can be held "
                           "(cancel it, or hold the next one before it starts)")
        self._held.add(job_id)
        self.store.set_held(job_id, True)
        if record is not None:
            self._park(job_id, Parked(record.spec, record.submit_time, self.controller.withdraw(job_id)))
        else:
            self._recheck(job_id)

    def _release(self, job_id: str) -> None:
        if job_id not in self._held:
            raise Conflict(f"job {job_id} is not held; nothing to release")
        self._held.discard(job_id)
        self.store.set_held(job_id, False)
        self._recheck(job_id)

    def _update(self, job_id: str, spec: JobSpec) -> None:
        record = self.controller.jobs.get(job_id)
        if record is not None and not record.state.terminal:
            self.controller.update(job_id, spec)
            record.note(self.controller.clock.now(),
                        f"updated by the user: priority {spec.priority}, worker max {spec.roles[Role.WORKER].max}")
            self._changed.add(job_id)
        elif job_id in self._parked:
            self._parked[job_id].spec = spec
        else:
            raise Conflict(f"job {job_id} has ended; nothing to update")

    def _state_of(self, job_id: str) -> str | None:
        record = self.controller.jobs.get(job_id)
        if record is not None:
            return record.state.value
        if job_id in self._parked:
            return JobState.PENDING.value
        row = self.store.job(job_id)
        return None if row is None else str(row["state"])

    def _admit(self, job_id: str, parked: Parked) -> None:
        """Hand a job to the controller, or park it while the gate says it waits."""
        self._parked[job_id] = parked
        self._recheck(job_id)

    def _recheck(self, job_id: str) -> None:
        """Apply the gate's verdict to a parked job: start it, keep it parked, or end it."""
        parked = self._parked[job_id]
        wait = wait_of(job_id in self._held, parked.spec, self._state_of)
        if wait is None:
            del self._parked[job_id]
            c = self.controller
            c.submit(parked.spec, job_id, at=parked.submit_time)
            old, new = parked.record, c.jobs[job_id]
            if old is not None:  # back from a hold: keep its books
                for name in ("restarts", "resizes", "preemptions", "first_start", "step", "loss", "last_checkpoint",
                             "decisions"):
                    setattr(new, name, getattr(old, name))
            if old is not None or parked.spec.after:
                new.note(c.clock.now(), "released: waiting for resources" if old is not None
                         else f"dependencies succeeded ({', '.join(parked.spec.after)}): waiting for resources")
        elif wait.final:
            self._end_parked(job_id, wait.text)
        else:
            self._note_parked(job_id, parked, wait)

    def _park(self, job_id: str, parked: Parked) -> None:
        self._parked[job_id] = parked
        self._recheck(job_id)

    def _note_parked(self, job_id: str, parked: Parked, wait: Wait) -> None:
        now = self.controller.clock.now()
        self._batch.jobs.setdefault(job_id, {})["why"] = wait.text
        self._batch.decisions.append((job_id, now, wait.text))
        if parked.record is not None:
            parked.record.note(now, wait.text)

    def _end_parked(self, job_id: str, reason: str) -> None:
        """A gated job never reached the controller (or left it): end it `cancelled` in the store."""
        del self._parked[job_id]
        self._held.discard(job_id)
        now = self.controller.clock.now()
        state = JobState.CANCELLED.value
        self._batch.jobs[job_id] = {"state": state, "finish_time": now, "message": reason, "why": reason}
        self._batch.events.append((now, job_id, state, state, "", 0, 0, reason))
        self._batch.decisions.append((job_id, now, reason))
        self._commands.put(lambda: self._dependents(job_id))

    def _dependents(self, job_id: str) -> None:
        for jid, parked in list(self._parked.items()):
            if job_id in parked.spec.after and jid in self._parked:
                self._recheck(jid)

    def _regate(self) -> None:
        """After recovery: gate again the jobs the store says are held or depend on others."""
        self._held = set(self.store.held_ids())
        for job_id, record in list(self.controller.live.items()):
            if record.state is JobState.PENDING and wait_of(job_id in self._held, record.spec, self._state_of):
                self._park(job_id, Parked(record.spec, record.submit_time, self.controller.withdraw(job_id)))
        self._flush()

    # -- the loop (daemon thread) ---------------------------------------------------
    def _run(self) -> None:
        failures = 0  # in a row: the pause after a failed step doubles, up to 30 s
        while not self._stop.is_set():
            try:
                self._drain()
                self.controller.step(max_wait=self.poll)
                self._log_decision()
                self._flush()
                if not self.controller.live and not self.controller.parked and self.engine.idle():
                    self._wait_for_command(self.poll)
                failures = 0
            except Exception:  # keep serving: one bad step must not stop the scheduler
                self.errors += 1
                failures += 1
                log.exception("controller step failed (%d in a row)", failures)
                self._stop.wait(min(30.0, self.poll * 2 ** failures))

    def _drain(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()

    def _wait_for_command(self, timeout: float) -> None:
        try:
            command = self._commands.get(timeout=timeout)
        except queue.Empty:
            return
        command()

    def _log_decision(self) -> None:
        """One `event=decision` line per cycle: counts and phase timings (info when it changed something)."""
        c = self.controller
        if c.cycles == self._logged_cycle:
            return
        self._logged_cycle = c.cycles
        plan = c.last_plan
        pending = sum(1 for r in c.live.values() if r.state is JobState.PENDING)
        fields: dict[str, Any] = {"cycle": c.cycles, "jobs": len(c.live), "pending": pending,
                                  "running": len(c.live) - pending, "gated": len(self._parked),
                                  "changes": len(self._batch.events), "rejected": len(plan.rejected),
                                  "ms": round(sum(plan.timings.values()) * 1000, 3)}
        fields.update({f"{phase}_ms": round(s * 1000, 3) for phase, s in plan.timings.items()})
        level = logging.INFO if self._batch.events or plan.rejected else logging.DEBUG
        log.log(level, "decision", extra={"fields": fields})

    # -- controller hooks -> store ------------------------------------------------------
    def _on_change(self, what: str, record: JobRecord) -> None:
        if what == "report":
            return
        if record.state.terminal:  # dependents decide after this step (not inside the controller's call)
            self._commands.put(lambda: self._dependents(record.id))
        self._changed.add(record.id)
        what = "recovered" if self._recovering and what == "submitted" else what
        self._batch.events.append((
            self.controller.clock.now(), record.id, what, record.state.value, record.allocation.describe()
            if record.allocation else "", record.allocation.gpus(record.spec), len(record.allocation),
            record.why))

    def _on_report(self, report: Report, record: JobRecord) -> None:
        self._changed.add(record.id)
        tasks = len(report.allocation) if report.allocation is not None else len(record.allocation)
        self._batch.reports.append((record.id, report.time, report.step, report.loss, report.steps_per_s,
                                    report.samples_per_s, tasks))

    def _flush(self) -> None:
        """Write what this step changed, and every new decision of a live job, in one transaction."""
        c = self.controller
        batch, self._batch = self._batch, Batch()
        changed, self._changed = self._changed, set()
        self.priced = self.priced or any(n.price_per_hour > 0 for n in c.cluster.nodes)  # e.g. a priced node joined
        for jid in changed | set(c.live):
            record = c.jobs.get(jid)
            if record is None:
                continue
            last = self._decided.get(jid)
            new = record.decisions
            if last is not None:
                idx = next((i for i in range(len(new) - 1, -1, -1) if new[i] == last), None)
                new = new[idx + 1:] if idx is not None else new
            if new:
                batch.decisions.extend((jid, t, text) for t, text in new)
                self._decided[jid] = new[-1]
                changed.add(jid)
        for jid in changed:
            record = c.jobs.get(jid)
            if record is not None:
                batch.jobs[jid] = {**_columns(record), "cost": self._cost(record)}
                if self._placed.get(jid) != record.allocation:
                    batch.tasks[jid] = tasks_of(record.allocation)
                    self._placed[jid] = record.allocation
            if record is not None and record.state.terminal:
                self._decided.pop(jid, None)
                self._placed.pop(jid, None)
        self.store.write(batch)
        if changed or not self.nodes_view or self._published_cluster is not c.cluster:  # a node came or went
            self._publish()

    def _cost(self, record: JobRecord) -> float | None:
        """USD the job has cost so far (this daemon's meter plus earlier daemons'); None with no prices."""
        if not self.priced:
            return None
        spent = self.controller.cost.job_cost(record.id, self.controller.clock.now())
        return round(self._cost_before.get(record.id, 0.0) + spent, 6)

    def _publish(self) -> None:
        """Rebuild the node and queue views the API serves (immutable, swapped in whole)."""
        c = self.controller
        self._published_cluster = c.cluster
        on_node: dict[str, list[str]] = {}
        usage: dict[str, dict[str, Any]] = {q: {"pending": 0, "running": 0, "gpus": 0, "cpu": 0.0}
                                            for q in self.queue_names}
        for record in c.live.values():
            q = usage.setdefault(record.spec.queue, {"pending": 0, "running": 0, "gpus": 0, "cpu": 0.0})
            if record.state.active:
                q["running"] += 1
                held = record.allocation.resources(record.spec)
                q["gpus"] += held.gpu
                q["cpu"] += held.cpu / 1000
            else:
                q["pending"] += 1
            for role, index, node in tasks_of(record.allocation):
                on_node.setdefault(node, []).append(f"{record.id}/{role}-{index}")
        self.nodes_view = tuple(MappingProxyType({
            "name": n.name, "gpu_type": n.gpu_type, "zone": n.zone, "transient": n.transient,
            "capacity": _resources(n.capacity), "free": _resources(c.free.get(n.name, n.capacity)),
            "tasks": tuple(on_node.get(n.name, ())),
        }) for n in c.cluster.nodes)
        self.queues_view = tuple(MappingProxyType({
            "name": name, **_queue_fields(c.queues.get(name)), **usage[name]}) for name in sorted(usage))


def _resources(r: Any) -> dict[str, Any]:
    return {"cpu": r.cpu / 1000, "memory_gib": round(r.memory / 2**30, 3), "gpu": r.gpu}


def _queue_fields(q: QueueSpec | None) -> dict[str, Any]:
    if q is None:
        return {"weight": 1.0, "quota": None, "parent": None, "priority": 0}
    return {"weight": q.weight, "quota": None if q.quota is None else _resources(q.quota),
            "parent": q.parent, "priority": q.priority}


def _columns(record: JobRecord) -> dict[str, Any]:
    return {
        "state": record.state.value, "first_start": record.first_start, "finish_time": record.finish_time,
        "restarts": record.restarts, "resizes": record.resizes, "preemptions": record.preemptions,
        "step": record.step, "loss": record.loss, "steps_per_s": record.steps_per_s,
        "allocation": record.allocation.describe() if record.allocation else "",
        "gpus": record.allocation.gpus(record.spec), "tasks": len(record.allocation),
        "why": record.why, "message": record.message,
    }
