"""The gang lifecycle every real engine shares; a `TaskRunner` says how one task runs (subprocess, Ray actor).

Life of a job: START books the tasks' resources in the `Ledger` and starts one
task per replica through the runner. Resources a stopping task holds stay
booked until its process is gone, so a START planned onto them waits (phase
WAITING) instead of double-booking a GPU. RESIZE and STOP send SIGTERM;
`trainmaster.train` checkpoints and exits with EXIT_PREEMPTED; once every task
is gone the engine starts the new size (or reports `JobStopped`), escalating
to SIGKILL after `grace` seconds. A start is `JobRunning` at its first
progress report (or, for a command that never reports, once all its tasks
stayed up `silent_running_after` s). A task that dies on its own breaks the
gang: the engine kills the rest and reports `TaskFailed`. `revoke(node)` kills
a node's tasks at once, as a vanished transient server would.

The engine never raises for one job's problem: a command that cannot start
(no such program, an environment too large, no such workdir) ends the job with
`JobFinished(failed)` and the reason, and gives back what it booked. Not
thread-safe: drive an engine from one thread.
"""

from __future__ import annotations

import enum
import errno
import logging
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.clock import Clock, RealClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import (
    Event,
    JobFinished,
    JobRunning,
    JobStopped,
    NodeAdded,
    NodeLost,
    RevocationNotice,
    TaskFailed,
)
from trainmaster.core.job import Architecture, JobSpec, Role
from trainmaster.core.market import Market
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.engines.base import Recovered
from trainmaster.engines.churn import Churn, Due
from trainmaster.engines.ledger import Ledger
from trainmaster.engines.progress import ProgressFolder, TargetWatch

EXIT_PREEMPTED = 75  # trainmaster.train.EXIT_PREEMPTED (engines may not import train/)
# Start errors that no retry can mend: the job fails at once with the reason.
PERMANENT_ERRNOS = frozenset({errno.ENOENT, errno.E2BIG, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR})
log = logging.getLogger("trainmaster.engine")


def complete_despite(name: str, codes: Mapping[str, int | None], allreduce: bool) -> bool:
    """Whether task `name`'s non-zero exit leaves its run complete: an all-reduce worker other than worker-0
    that ended after worker-0 exited 0 (worker-0 cannot finish its steps without every worker in every
    collective; see `GangEngine._after_chief`). Parameter-server workers are independent: never."""
    return (allreduce and name.startswith("worker-") and name != "worker-0"
            and codes.get(name) not in (None, 0) and codes.get("worker-0") == 0)


@dataclass(frozen=True, slots=True)
class TaskLaunch:
    """One task to start: where, with what, holding which devices."""

    job_id: str
    role: Role
    index: int
    node: str
    attempt: int
    command: tuple[str, ...]
    workdir: str | None  # the job's spec.workdir; the runner resolves it where the task runs
    env: Mapping[str, str]
    cores: tuple[int, ...]
    gpus: tuple[int, ...]
    need: Resources

    @property
    def name(self) -> str:
        return f"{self.role.value}-{self.index}"


class RunningTask(Protocol):
    """A started task, as the engine supervises it."""

    launch: TaskLaunch

    @property
    def pid(self) -> int: ...

    @property
    def where(self) -> str:
        """Where its output goes, for messages (a log path)."""
        ...

    def poll(self) -> int | None:
        """Exit code once it has ended, else None."""
        ...

    def signal(self, sig: signal.Signals) -> None: ...

    def reap(self) -> None:
        """Wait for it to be gone (after SIGKILL)."""
        ...


class ProgressSource(Protocol):
    def read(self) -> list[dict[str, object]]:
        """Progress lines the job's chief wrote since the last call."""
        ...


@dataclass(frozen=True)
class Attempt:
    """What a runner sets up for one start of a job: shared environment, the chief's, its progress."""

    env: Mapping[str, str]  # every task: rendezvous, checkpoint directory
    chief_env: Mapping[str, str]  # worker 0 only: where to write progress
    progress: ProgressSource


class TaskRunner(Protocol):
    """How tasks run on one kind of engine: processes here, Ray actors on a cluster."""

    def cannot_start(self, spec: JobSpec) -> str | None:
        """Why the job's command can never start here (the user's to fix), else None."""
        ...

    def command(self, spec: JobSpec) -> tuple[str, ...]:
        """The command as the task will run it (e.g. `python` as this interpreter)."""
        ...

    def begin(self, job_id: str, attempt: int, workers: Sequence[str], servers: Sequence[str]) -> Attempt:
        """Prepare an attempt on these nodes (one entry per task) before any task starts."""
        ...

    def start(self, launch: TaskLaunch) -> RunningTask:
        """Start one task; raises OSError or ValueError when it cannot start. May return before it runs
        (then `confirm` waits for it), so the tasks of one start come up together, not one after another."""
        ...

    def confirm(self, tasks: Sequence[RunningTask]) -> None:
        """Wait until every task just started runs; raises OSError (as `start`) when one cannot."""
        ...

    def tick(self, live: Sequence[RunningTask], starting: bool) -> None:
        """Housekeeping between polls (log caps, spare interpreters); `starting`: a job is coming up."""
        ...

    def last_attempt(self, job_id: str) -> int:
        """The highest attempt number already used for the job (a restarted daemon continues from it)."""
        ...

    def recover(self) -> Mapping[str, Recovered]: ...

    def close(self) -> None: ...


def as_this_python(spec: JobSpec) -> tuple[str, ...]:
    """The job's command with `python`/`python3` as this interpreter (the same environment, on every node)."""
    command = list(spec.command)
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    return tuple(command)


class Phase(enum.Enum):
    IDLE = "idle"  # no tasks
    WAITING = "waiting"  # start decided; waiting for the ledger to free what stopping tasks still hold
    RUNNING = "running"
    DRAINING = "draining"  # tasks told to stop; start again (or report stopped) once all are gone
    BROKEN = "broken"  # a task died; the rest were killed; the controller decides what next


@dataclass
class _Job:
    job_id: str
    spec: JobSpec
    allocation: Allocation = EMPTY
    attempt: int = 0
    tasks: list[RunningTask] = field(default_factory=list)
    phase: Phase = Phase.IDLE
    next_allocation: Allocation | None = None  # start this once drained (None: stay stopped)
    drain_deadline: float = 0.0
    waiting_since: float = 0.0
    announce_stop: bool = False  # emit JobStopped when drained
    running_seen: bool = False
    launched_at: float = 0.0
    progress: ProgressSource | None = None
    folder: ProgressFolder = field(default_factory=ProgressFolder)
    checkpoint_step: int | None = None
    watch: TargetWatch | None = None
    finished: str | None = None  # reached its target: stopping the tasks, then report success with this
    finish_after: float = 0.0  # a job that reached its target has until then to end on its own
    batch: int | None = None  # adaptive jobs: the global batch the policy chose, passed as TM_BATCH_SIZE
    peer_crash_at: float | None = None  # when a non-chief all-reduce worker was first seen dead (see _after_chief)


    def live(self) -> list[RunningTask]:
        return [t for t in self.tasks if t.poll() is None]


class GangEngine:
    """Gang scheduling of real tasks through a `TaskRunner` (see the module docstring)."""

    def __init__(self, cluster: Cluster, runner: TaskRunner, *, clock: Clock | None = None, grace: float = 20.0,
                 poll_interval: float = 0.05, silent_running_after: float = 30.0,
                 ledger_journal: Path | None = None, machine: list[int] | None = None,
                 target_grace: float = 5.0, market: Market | None = None,
                 replace_delay: float | None = None) -> None:
        self._cluster = cluster
        self.runner = runner
        self._clock: Clock = clock or RealClock()
        self.grace = grace
        self.poll_interval = poll_interval
        self.silent_running_after = silent_running_after
        self.target_grace = target_grace  # a job past its target that has not ended by itself after this is stopped
        self.wait_limit = 2 * grace + 30.0  # a start still waiting for resources after this fails (a bug guard)
        self.ledger = Ledger.for_cluster(cluster, ledger_journal, machine)
        self.revoked: set[str] = set()
        self._jobs: dict[str, _Job] = {}
        self._events: list[Event] = []
        self.churn = Churn(market, replace_delay)  # boots, market revocations and replacements on this clock
        self.churn.start(cluster.nodes, self._clock.now())

    # -- engine protocol -----------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    def cluster(self) -> Cluster:
        return self._cluster

    def idle(self) -> bool:
        return not self._events and self.churn.quiet() and not any(
            j.live() or j.phase in (Phase.DRAINING, Phase.WAITING) for j in self._jobs.values())

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out the actions; a job's problem becomes an event for that job, never an exception."""
        for action in actions:
            try:
                self._apply(action)
            except Exception as exc:  # an engine bug must not wedge the scheduler: fail this job, loudly
                log.exception("engine: %s of job %s failed", action.kind.value, action.job_id)
                self._abandon(action.job_id, f"engine error during {action.kind.value}: {exc!r}")

    def wait(self, timeout: float | None) -> list[Event]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            events = self._poll()
            if events:
                return events
            if timeout is None and self.idle():
                return []
            if deadline is not None and time.monotonic() >= deadline:
                return []
            pause = self.poll_interval if deadline is None else min(self.poll_interval, deadline - time.monotonic())
            time.sleep(max(0.0, pause))

    def recover(self) -> Mapping[str, Recovered]:
        """At daemon start: the runner ends what a dead predecessor left running and judges each job's last
        attempt (a job whose workers all exited 0 finished while no daemon watched: never run it again)."""
        found = self.runner.recover()
        self.ledger.mark("orphans-killed")  # from here on, nothing the journal lacks holds a device
        return found

    def close(self, grace: float | None = None) -> None:
        """Stop every task: SIGTERM (they checkpoint), then SIGKILL after `grace` seconds."""
        tasks = [t for j in self._jobs.values() for t in j.live()]
        for task in tasks:
            task.signal(signal.SIGTERM)
        deadline = time.monotonic() + (self.grace if grace is None else grace)
        while any(t.poll() is None for t in tasks) and time.monotonic() < deadline:
            time.sleep(0.05)
        for task in tasks:
            task.signal(signal.SIGKILL)
        for task in tasks:
            task.reap()
        for job in self._jobs.values():
            self._release(job)
        self._jobs.clear()
        self.runner.close()

    def add_node(self, node: Node, at: float | None = None) -> None:
        """A node joins at `at` (default now; a provider's node boots until then); `NodeAdded` follows."""
        if at is not None and at > self._clock.now():
            self.churn.boot(node, at)
            return
        if node.name in self._cluster:
            return
        self._cluster = self._cluster.with_nodes((*self._cluster.nodes, node))
        self.revoked.discard(node.name)
        self.ledger.add_node(node)
        self.churn.watch(node, self._clock.now())
        self._events.append(NodeAdded(self._clock.now(), node))

    def remove_node(self, name: str) -> None:
        """A node leaves (revoked, or scaled down): its tasks are killed at once; `NodeLost` follows.
        A node still booting is just forgotten (it never joined)."""
        if not self.churn.cancel(name):
            self.revoke(name)

    @property
    def market(self) -> Market | None:
        return self.churn.market

    def nodes_and_booting(self) -> list[Node]:
        """The nodes now and those that will join (a provider counts both against its limits)."""
        return [*self._alive(), *self.churn.booting()]

    def _alive(self) -> list[Node]:
        return [n for n in self._cluster.nodes if n.name not in self.revoked]

    def revoke(self, node: str) -> None:
        """Emulate losing `node`: SIGKILL its tasks (no SIGTERM, no checkpoint) and report `NodeLost`.

        The other tasks of each job that had a task there are SIGKILLed too (the
        gang is broken); the controller stops those jobs and places them again,
        and they resume from their last checkpoint. Starts on `node` fail from now on.
        """
        self.revoked.add(node)
        for job in self._jobs.values():
            if any(t.launch.node == node for t in job.live()):
                for task in job.live():
                    task.signal(signal.SIGKILL)
                job.phase = Phase.BROKEN
                job.next_allocation = None
        self._events.append(NodeLost(self._clock.now(), node))

    # -- views -------------------------------------------------------------------
    def pids(self, job_id: str) -> dict[str, int]:
        """`role-index` -> pid of the job's running tasks."""
        job = self._jobs.get(job_id)
        return {t.launch.name: t.pid for t in job.live()} if job else {}

    def tasks(self, job_id: str) -> list[RunningTask]:
        job = self._jobs.get(job_id)
        return list(job.tasks) if job else []

    def phase(self, job_id: str) -> Phase:
        job = self._jobs.get(job_id)
        return job.phase if job else Phase.IDLE

    # -- internals -------------------------------------------------------------
    def _apply(self, action: Action) -> None:
        job = self._jobs.get(action.job_id)
        if job is None:
            job = self._jobs[action.job_id] = _Job(action.job_id, action.spec,
                                                   attempt=self.runner.last_attempt(action.job_id))
        job.spec = action.spec
        if action.batch is not None:
            job.batch = action.batch
        if action.kind is ActionKind.STOP:
            hard = action.cause in (StopCause.NODE_LOST, StopCause.FAILED)
            self._replace(job, None, signal.SIGKILL if hard else signal.SIGTERM, announce=not hard)
        elif action.kind is ActionKind.RESTART:
            self._replace(job, action.allocation, signal.SIGKILL, announce=False)
        else:  # START, RESIZE
            self._replace(job, action.allocation, signal.SIGTERM, announce=False)

    def _abandon(self, job_id: str, message: str) -> None:
        """Kill whatever the job has left and report it failed (after an engine error)."""
        job = self._jobs.get(job_id)
        if job is not None:
            for task in job.live():
                task.signal(signal.SIGKILL)
            job.next_allocation = None
            job.announce_stop = False
            job.phase = Phase.DRAINING if job.live() else Phase.IDLE
            if not job.live():
                self._release(job)
        self._events.append(JobFinished(self._clock.now(), job_id, succeeded=False, message=message))

    def _replace(self, job: _Job, allocation: Allocation | None, sig: signal.Signals, *, announce: bool) -> None:
        """Stop the job's tasks with `sig`; start `allocation` (if any) once they are gone."""
        live = job.live()
        job.next_allocation = allocation or None
        job.announce_stop = announce and bool(live)
        if live:
            for task in live:
                task.signal(sig)
            if job.phase is not Phase.DRAINING or sig is signal.SIGKILL:
                job.drain_deadline = time.monotonic() + (0.0 if sig is signal.SIGKILL else self.grace)
            job.phase = Phase.DRAINING
            return
        self._release(job)
        job.phase = Phase.IDLE
        if allocation:
            self._start(job, allocation)

    def _start(self, job: _Job, allocation: Allocation) -> None:
        """Start now if the ledger has room on every node, else wait for stopping tasks to free it."""
        problem = self.runner.cannot_start(job.spec)
        lost = [n for n in allocation.nodes if n in self.revoked or n not in self._cluster]
        if lost:
            problem = f"cannot start on unknown or revoked node {lost[0]}"
        if problem:
            self._fail(job, problem)
            return
        job.allocation = allocation
        if self._fits(job.spec, allocation):
            self._launch(job, allocation)
        else:
            job.phase = Phase.WAITING
            job.waiting_since = time.monotonic()

    def _fits(self, spec: JobSpec, allocation: Allocation) -> bool:
        return all(self.ledger.fits(node, need) for node, need in allocation.per_node(spec).items())

    def _release(self, job: _Job) -> None:
        """Give back what the job's tasks booked; only once their processes are gone."""
        for task in job.tasks:
            t = task.launch
            self.ledger.give_back(t.node, t.need, list(t.cores), list(t.gpus), f"{job.job_id}/{t.name}")
        job.tasks = []

    def _fail(self, job: _Job, message: str) -> None:
        self._events.append(JobFinished(self._clock.now(), job.job_id, succeeded=False, message=message))
        job.phase = Phase.IDLE
        job.next_allocation = None

    def _launch(self, job: _Job, allocation: Allocation) -> None:
        """Start every task of the allocation, or none: a task that cannot start undoes the others."""
        try:
            self._launch_tasks(job, allocation)
        except (OSError, ValueError) as exc:
            for task in job.tasks:
                task.signal(signal.SIGKILL)
            for task in job.tasks:
                task.reap()
            self._release(job)
            message = f"cannot start the job's command: {exc}"
            if isinstance(exc, OSError) and exc.errno not in PERMANENT_ERRNOS:
                job.phase = Phase.BROKEN  # the machine's trouble (no memory, too many processes): retry later
                self._events.append(TaskFailed(self._clock.now(), job.job_id, message))
            else:
                self._fail(job, f"{message} (check spec.command, spec.env and spec.workdir)")

    def _launch_tasks(self, job: _Job, allocation: Allocation) -> None:
        spec = job.spec
        job.attempt += 1
        job.allocation = allocation
        job.running_seen = False
        job.launched_at = time.monotonic()
        job.peer_crash_at = None
        job.folder = ProgressFolder()
        workers = [p.node for p in allocation.tasks if p.role is Role.WORKER]
        workers.sort(key=self._transient)  # the chief (rank 0) on an on-demand node when there is one (anchors)
        servers = [p.node for p in allocation.tasks if p.role is Role.PS]
        attempt = self.runner.begin(job.job_id, job.attempt, workers, servers)
        job.progress = attempt.progress
        job.watch = TargetWatch(spec.target)
        job.finished = None
        shared = {
            **attempt.env, "WORLD_SIZE": str(len(workers)), "TM_JOB_ID": job.job_id, "TM_ATTEMPT": str(job.attempt),
            "TM_CHECKPOINT_EVERY": str(spec.checkpoint_every), "TM_ARCH": spec.architecture.value,
            "TM_NUM_WORKERS": str(len(workers)), "TM_NUM_PS": str(len(servers)), "PYTHONUNBUFFERED": "1",
        }
        if spec.target.steps:
            shared["TM_TARGET_STEPS"] = str(spec.target.steps)
        shared.update(dict(spec.env))
        if job.batch is not None:  # the scheduler's choice wins over the spec's own
            shared["TM_BATCH_SIZE"] = str(job.batch)
        if spec.adaptive_batch is not None and spec.adaptive_batch.local_max is not None:
            shared["TM_LOCAL_MAX"] = str(spec.adaptive_batch.local_max)  # the cap the goodput law counted with
        command = self.runner.command(spec)
        per_node: dict[str, int] = {}
        for role, nodes in ((Role.PS, servers), (Role.WORKER, workers)):
            need = spec.roles[role].resources if role in spec.roles else Resources()
            for index, node in enumerate(nodes):
                task_id = f"{job.job_id}/{role.value}-{index}"
                cores, gpus = self.ledger.take(node, need, task_id)
                local_rank = per_node.get(node, 0)
                per_node[node] = local_rank + 1
                env = {**shared, **(attempt.chief_env if role is Role.WORKER and index == 0 else {}),
                       "TM_ROLE": role.value, "TM_INDEX": str(index), "TM_NODE": node, "TM_CPUS": str(len(cores)),
                       "RANK": str(index), "LOCAL_RANK": str(local_rank),
                       "OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores)),
                       "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}
                launch = TaskLaunch(job.job_id, role, index, node, job.attempt, command, spec.workdir, env,
                                    tuple(cores), tuple(gpus), need)
                try:
                    task = self.runner.start(launch)
                except BaseException:
                    self.ledger.give_back(node, need, cores, gpus, task_id)
                    raise
                job.tasks.append(task)
        self.runner.confirm(job.tasks)
        job.phase = Phase.RUNNING

    def _transient(self, node: str) -> bool:
        return node in self._cluster and self._cluster.node(node).transient

    def _poll(self) -> list[Event]:
        self._churn()
        events, self._events = self._events, []
        for job in list(self._jobs.values()):
            try:
                events.extend(self._poll_job(job))
                if job.phase is Phase.WAITING:  # in arrival order: the first planned gets freed room first
                    self._poll_waiting(job)
            except Exception as exc:  # an engine bug must not wedge the scheduler: fail this job, loudly
                log.exception("engine: polling job %s failed", job.job_id)
                self._abandon(job.job_id, f"engine error: {exc!r}")
        events.extend(self._events)
        self._events = []
        starting = any(j.phase is Phase.RUNNING and not j.running_seen for j in self._jobs.values())
        self.runner.tick([t for j in self._jobs.values() for t in j.live()], starting)
        return events

    def _churn(self) -> None:
        """Act on the node changes that have come due: joins, revocation notices, losses."""
        now = self._clock.now()
        for change in self.churn.due(now, self._alive()):
            if change.kind is Due.JOIN:
                self.add_node(change.node)
            elif change.kind is Due.NOTICE and change.node.name in self._cluster:
                self._events.append(RevocationNotice(now, change.node.name, change.lost_at))
            elif change.kind is Due.LOSS and change.node.name in self._cluster \
                    and change.node.name not in self.revoked:
                log.info("engine: node %s revoked by the market", change.node.name)
                self.revoke(change.node.name)
                self.churn.lost(change, now)

    def _poll_waiting(self, job: _Job) -> None:
        if self._fits(job.spec, job.allocation):
            self._launch(job, job.allocation)
        elif time.monotonic() - job.waiting_since > self.wait_limit:
            busy = [n for n, need in job.allocation.per_node(job.spec).items() if not self.ledger.fits(n, need)]
            job.phase = Phase.BROKEN
            self._events.append(TaskFailed(self._clock.now(), job.job_id,
                                           f"could not start within {self.wait_limit:g}s: node(s) "
                                           f"{', '.join(busy)} still held by stopping tasks"))

    def _poll_job(self, job: _Job) -> list[Event]:
        now = self._clock.now()
        out: list[Event] = []
        if job.progress is not None and job.phase in (Phase.RUNNING, Phase.DRAINING):
            progress = job.folder.fold(job.progress.read())
            if progress is not None:
                if progress.checkpoint_step is not None:
                    job.checkpoint_step = progress.checkpoint_step
                if job.phase is Phase.RUNNING:
                    if not job.running_seen:
                        job.running_seen = True
                        out.append(JobRunning(now, job.job_id, job.allocation))
                    out.append(progress.report(now, job.job_id, job.allocation))
                    if job.finished is None and job.watch is not None:
                        job.finished = job.watch.check(progress)
                        job.finish_after = time.monotonic() + self.target_grace
        if job.phase is Phase.RUNNING and job.finished is not None and time.monotonic() >= job.finish_after:
            # The job reached its target but runs on: enforce it (checkpoint and stop), then it succeeded.
            self._replace(job, None, signal.SIGTERM, announce=False)
            if not job.live():  # nothing was left running
                del self._jobs[job.job_id]
                out.append(JobFinished(now, job.job_id, succeeded=True, message=f"reached its target: {job.finished}"))
                return out
        if job.phase is Phase.RUNNING and not job.running_seen and \
                time.monotonic() - job.launched_at >= self.silent_running_after and len(job.live()) == len(job.tasks):
            job.running_seen = True  # a command that never reports: running once it has stayed up a while
            out.append(JobRunning(now, job.job_id, job.allocation))
        if job.phase is Phase.DRAINING:
            if job.live() and time.monotonic() >= job.drain_deadline:
                for task in job.live():
                    task.signal(signal.SIGKILL)
            if not job.live():
                self._release(job)
                job.phase = Phase.IDLE
                if job.finished is not None:
                    del self._jobs[job.job_id]
                    out.append(JobFinished(now, job.job_id, succeeded=True,
                                           message=f"reached its target: {job.finished}"))
                    return out
                if job.announce_stop:
                    out.append(JobStopped(now, job.job_id, job.checkpoint_step))
                if job.next_allocation:
                    self._start(job, job.next_allocation)
        elif job.phase is Phase.RUNNING:
            out.extend(self._check_exits(job, now))
        elif job.phase in (Phase.BROKEN, Phase.IDLE) and job.tasks and not job.live():
            self._release(job)
        return out

    def _check_exits(self, job: _Job, now: float) -> list[Event]:
        crashed_at_exit: list[str] = []
        for task in job.tasks:
            code = task.poll()
            if code in (None, 0):
                continue
            verdict = self._after_chief(job, task)
            if verdict == "wait":
                return []
            if verdict == "finished":
                crashed_at_exit.append(f"{task.launch.name} exited with code {code} after worker-0 finished")
                continue
            for other in job.live():
                other.signal(signal.SIGKILL)
            job.phase = Phase.BROKEN
            what = "stopped unexpectedly" if code == EXIT_PREEMPTED else f"exited with code {code}"
            return [TaskFailed(now, job.job_id, f"{task.launch.name} {what} (log: {task.where})")]
        workers = [t for t in job.tasks if t.launch.role is Role.WORKER]
        if not workers or any(t.poll() is None for t in workers):
            return []
        out: list[Event] = []
        if not job.running_seen:  # it ran and ended between two polls: it was running all the same
            job.running_seen = True
            out.append(JobRunning(now, job.job_id, job.allocation))
        progress = job.folder.fold(job.progress.read()) if job.progress is not None else None
        if progress is not None:  # the last lines, written at exit
            out.append(progress.report(now, job.job_id, job.allocation, epoch=False))
        for task in job.live():  # parameter servers that outlived their workers
            task.signal(signal.SIGKILL)
        for task in job.tasks:
            task.reap()
        self._release(job)
        del self._jobs[job.job_id]
        note = f" ({'; '.join(crashed_at_exit)}: a crash at exit, the run was complete)" if crashed_at_exit else ""
        out.append(JobFinished(now, job.job_id, succeeded=True, message="all workers finished" + note))
        return out

    def _after_chief(self, job: _Job, task: RunningTask) -> Literal["fail", "wait", "finished"]:
        """How to read a non-zero exit: "fail", "wait" (for worker-0's own exit), or "finished".

        An all-reduce worker cannot finish its steps without every other worker
        taking part in each collective, so once worker-0 has exited 0 the run
        was complete, and another worker's crash after it (torch 2.13 gloo
        workers can abort at interpreter exit, pytorch/pytorch#190489) loses
        nothing: reporting it as a task failure would restart a finished job.
        While worker-0 still runs, it gets `grace` seconds to settle which it is.
        Parameter-server jobs keep the strict rule: their workers are independent.
        """
        allreduce = job.spec.architecture is Architecture.ALLREDUCE
        codes = {t.launch.name: t.poll() for t in job.tasks}
        if complete_despite(task.launch.name, codes, allreduce):
            return "finished"
        if allreduce and task.launch.role is Role.WORKER and task.launch.index > 0 and codes.get("worker-0", 1) is None:
            if job.peer_crash_at is None:
                job.peer_crash_at = time.monotonic()
            if time.monotonic() - job.peer_crash_at < self.grace:
                return "wait"
        return "fail"
