"""The controller on the real clock, in one thread, fed by the API through a command queue.

Only the daemon thread touches the Controller. API threads validate and commit
a job to the store, then queue a command; reads come from the store or from
views the daemon thread republishes after every step (plain immutable values,
swapped in whole). A daemon killed at any moment restarts from the store:
unfinished jobs go back to the controller with their ids and submit times,
after the engine has killed any task process the dead daemon left behind, and
the engine restarts each from its checkpoint; nothing runs twice.
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
from trainmaster.core.errors import SpecError, TrainmasterError
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.queue import QueueSpec
from trainmaster.core.runnable import check_runnable
from trainmaster.core.spec import job_from_mapping
from trainmaster.core.states import JobState
from trainmaster.engines.base import Engine
from trainmaster.policies.registry import available, make_policy
from trainmaster.policies.snapshot import Policy, Snapshot
from trainmaster.policies.workspace import never_fits
from trainmaster.server.store import Batch, Store

log = logging.getLogger("trainmaster.server")
T = TypeVar("T")
DEFAULT_QUEUE = "default"
# The best preset that exists in this build, first match wins: the daemon should resize jobs when it can.
POLICY_PREFERENCE = ("trainmaster", "edl", "optimus", "fifo")


def best_policy() -> Policy:
    """The first preset of POLICY_PREFERENCE that is registered and builds (others may still be in the works)."""
    names = set(available())
    for name in POLICY_PREFERENCE:
        if name in names:
            try:
                return make_policy(name)
            except ImportError:
                log.warning("policy %s is registered but does not import; trying the next", name)
    return make_policy("fifo")


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
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.nodes_view: tuple[Mapping[str, Any], ...] = ()
        self.queues_view: tuple[Mapping[str, Any], ...] = ()
        self._recovering = False

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        """Recover unfinished jobs from the store, then run the controller thread."""
        self.recover()
        self._thread = threading.Thread(target=self._run, name="trainmaster-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop, then the engine's tasks (they checkpoint; the next start resumes them)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        close = getattr(self.engine, "close", None)  # beyond the Engine protocol: the local engine has it
        if callable(close):
            close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def recover(self) -> int:
        """Hand every unfinished job in the store back to the controller; returns how many."""
        cleanup = getattr(self.engine, "cleanup_orphans", None)
        if callable(cleanup):
            cleanup()  # kill tasks a killed daemon left running, so nothing runs twice
        rows = self.store.unfinished()
        self._recovering = True
        try:
            for row in rows:
                self._recover_one(row)
        finally:
            self._recovering = False
        self._flush()
        return len(rows)

    def _recover_one(self, row: dict[str, Any]) -> None:
        c = self.controller
        now = c.clock.now()
        try:
            spec = job_from_mapping(row["doc"])
        except TrainmasterError as exc:  # accepted by an older build, invalid now
            self._batch.jobs[row["id"]] = {"state": JobState.FAILED.value, "finish_time": now,
                                           "message": f"cannot recover: {exc}"}
            return
        jid = c.submit(spec, row["id"], at=row["submit_time"])
        record = c.jobs[jid]
        self._changed.add(jid)
        if jid not in c.live:  # rejected on the way back in (its queue is gone from the configuration)
            return
        was_active = JobState(row["state"]).active
        record.restarts = row["restarts"] + int(was_active)
        record.first_start = row["first_start"]
        record.step = row["step"]
        record.loss = row["loss"]
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
        if reason:
            raise SpecError("spec.roles", f"impossible resources: {reason}",
                            "ask for less per replica or fewer minimum replicas")
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
        """Run `fn(controller)` in the daemon thread and return its result."""
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn(self.controller))
            except BaseException as exc:  # handed back to the caller's thread
                future.set_exception(exc)

        self._commands.put(run)
        return future.result(timeout)

    def _adopt(self, job_id: str, spec: JobSpec, at: float) -> None:
        if job_id not in self.controller.jobs:
            self.controller.submit(spec, job_id, at=at)

    def _cancel(self, job_id: str) -> None:
        if job_id in self.controller.jobs:
            self.controller.cancel(job_id)

    # -- the loop (daemon thread) ---------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._drain()
                self.controller.step(max_wait=self.poll)
                self._flush()
                if not self.controller.live and self.engine.idle():
                    self._wait_for_command(self.poll)
            except Exception:  # keep serving: one bad step must not stop the scheduler
                self.errors += 1
                log.exception("controller step failed")
                self._stop.wait(self.poll)

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

    # -- controller hooks -> store ------------------------------------------------------
    def _on_change(self, what: str, record: JobRecord) -> None:
        if what == "report":
            return
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
                batch.jobs[jid] = _columns(record)
                if self._placed.get(jid) != record.allocation:
                    batch.tasks[jid] = tasks_of(record.allocation)
                    self._placed[jid] = record.allocation
            if record is not None and record.state.terminal:
                self._decided.pop(jid, None)
                self._placed.pop(jid, None)
        self.store.write(batch)
        if changed or not self.nodes_view:
            self._publish()

    def _publish(self) -> None:
        """Rebuild the node and queue views the API serves (immutable, swapped in whole)."""
        c = self.controller
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
        "restarts": record.restarts, "step": record.step, "loss": record.loss, "steps_per_s": record.steps_per_s,
        "allocation": record.allocation.describe() if record.allocation else "",
        "gpus": record.allocation.gpus(record.spec), "tasks": len(record.allocation),
        "why": record.why, "message": record.message,
    }
