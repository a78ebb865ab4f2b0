"""The `local` engine: every task a real process on this machine, driven by the same controller.

Life of a job: START books the tasks' resources in the engine's `Ledger` and
launches one process per task (own session, pinned to its virtual node's
cores, a free rendezvous port per launch). Resources a stopping task holds
stay booked until its process is gone, so a START planned onto them waits
(phase WAITING) instead of double-booking a GPU. RESIZE and STOP send
SIGTERM; `trainmaster.train` checkpoints and exits with EXIT_PREEMPTED; once
every task is gone the engine relaunches at the new size (or reports
`JobStopped`), escalating to SIGKILL after `grace` seconds. A launch is
`JobRunning` at its first progress report (or, for a command that never
reports, once all its tasks stayed up `silent_running_after` s). A task that
dies on its own breaks the gang: the engine kills the rest and reports
`TaskFailed`. `revoke(node)` SIGKILLs a virtual node's tasks at once, as a
vanished transient server would.

The engine never raises for one job's problem: a command that cannot start
(no such program, an environment too large, no such workdir) ends the job with
`JobFinished(failed)` and the reason, and gives back what it booked.

Paths: logs `run_dir/<job>/<role>-<index>.log` (appended across attempts,
capped at `log_max_bytes` with one older part in `.log.1`), checkpoints
`run_dir/<job>/checkpoint/` (or the job's TM_CHECKPOINT_DIR), progress
`run_dir/<job>/reports/attempt-<n>.jsonl`, pid files
`run_dir/<job>/pids/<role>-<index>.pid`, exit codes
`run_dir/<job>/exits/attempt-<n>/<role>-<index>`. A relative `spec.workdir` is
taken from `base_dir` (default: the current directory); a command starting
with `python`/`python3` runs under this interpreter; with `prestart=N` such
commands are handed to one of N interpreters kept ready with torch imported
(`warm.py`). Tasks get this process's environment minus the daemon's secrets
(`TRAINMASTER_*` and the `secret_env` names). After a daemon was killed, call
`recover()` before starting jobs: it kills the tasks the dead daemon left
behind and tells how each job's last attempt ended. Not thread-safe: drive an
engine from one thread.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.clock import Clock, RealClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, JobFinished, JobRunning, JobStopped, NodeLost, Report, TaskFailed
from trainmaster.core.job import Architecture, JobSpec, Role
from trainmaster.core.resources import Resources
from trainmaster.engines.base import Recovered
from trainmaster.engines.local.machine import Ledger, local_cluster
from trainmaster.engines.local.recovery import judge_attempts, write_manifest
from trainmaster.engines.local.reports import LineTail, ProgressFolder
from trainmaster.engines.local.tasks import Task, kill_group, kill_orphans, launch, rotate_log, start_spare

EXIT_PREEMPTED = 75  # trainmaster.train.EXIT_PREEMPTED (engines may not import train/)
LOG_MAX_BYTES = 100 * 2**20  # per task, both parts together
SECRET_PREFIX = "TRAINMASTER_"  # the daemon's own settings (its token above all) never reach a job
# Launch errors that no retry can mend: the job fails at once with the reason.
PERMANENT_ERRNOS = frozenset({errno.ENOENT, errno.E2BIG, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR})
log = logging.getLogger("trainmaster.engine")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Phase(enum.Enum):
    IDLE = "idle"  # no tasks
    WAITING = "waiting"  # launch decided; waiting for the ledger to free what stopping tasks still hold
    RUNNING = "running"
    DRAINING = "draining"  # tasks told to stop; relaunch (or report stopped) once all are gone
    BROKEN = "broken"  # a task died; the rest were killed; the controller decides what next


@dataclass
class _Job:
    job_id: str
    spec: JobSpec
    allocation: Allocation = EMPTY
    attempt: int = 0
    tasks: list[Task] = field(default_factory=list)
    phase: Phase = Phase.IDLE
    next_allocation: Allocation | None = None  # launch this once drained (None: stay stopped)
    drain_deadline: float = 0.0
    waiting_since: float = 0.0
    announce_stop: bool = False  # emit JobStopped when drained
    running_seen: bool = False
    launched_at: float = 0.0
    tail: LineTail | None = None
    folder: ProgressFolder = field(default_factory=ProgressFolder)
    checkpoint_step: int | None = None

    def live(self) -> list[Task]:
        return [t for t in self.tasks if t.poll() is None]


class LocalEngine:
    """Runs jobs as processes on this machine (see the module docstring)."""

    def __init__(self, cluster: Cluster | None = None, *, run_dir: Path, clock: Clock | None = None,
                 base_dir: Path | None = None, grace: float = 20.0, poll_interval: float = 0.05,
                 env: Mapping[str, str] | None = None, prestart: int = 0,
                 silent_running_after: float = 30.0, log_max_bytes: int = LOG_MAX_BYTES,
                 secret_env: Iterable[str] = (), ledger_journal: Path | None = None) -> None:
        self._cluster = cluster or local_cluster()
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._clock: Clock = clock or RealClock()
        self.base_dir = Path(base_dir or Path.cwd()).resolve()
        self.grace = grace
        self.poll_interval = poll_interval
        self.silent_running_after = silent_running_after
        self.wait_limit = 2 * grace + 30.0  # a launch still waiting for resources after this fails (a bug guard)
        self.log_max_bytes = log_max_bytes
        self.secret_env = frozenset(secret_env)
        self.extra_env = dict(env or {})
        self.ledger = Ledger.for_cluster(self._cluster, ledger_journal)
        self.revoked: set[str] = set()
        self._jobs: dict[str, _Job] = {}
        self._events: list[Event] = []
        self._next_rotation = 0.0
        self.prestart = prestart  # interpreters kept ready with torch imported, for Python task commands
        self._spares: list[subprocess.Popen[bytes]] = []
        self._refill_spares()

    # -- engine protocol -----------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    def cluster(self) -> Cluster:
        return self._cluster

    def idle(self) -> bool:
        return not self._events and not any(
            j.live() or j.phase in (Phase.DRAINING, Phase.WAITING) for j in self._jobs.values())

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out the actions; a job's problem becomes an event for that job, never an exception."""
        for action in actions:
            try:
                self._apply(action)
            except Exception as exc:  # an engine bug must not wedge the scheduler: fail this job, loudly
                log.exception("local engine: %s of job %s failed", action.kind.value, action.job_id)
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

    # -- controls beyond the protocol -----------------------------------------
    def revoke(self, node: str) -> None:
        """Emulate losing `node`: SIGKILL its tasks (no SIGTERM, no checkpoint) and report `NodeLost`.

        The other tasks of each job that had a task there are SIGKILLed too (the
        gang is broken); the controller stops those jobs and places them again,
        and they resume from their last checkpoint. Launches on `node` fail from now on.
        """
        self.revoked.add(node)
        for job in self._jobs.values():
            if any(t.node == node for t in job.live()):
                for task in job.live():
                    task.signal(signal.SIGKILL)
                job.phase = Phase.BROKEN
                job.next_allocation = None
        self._events.append(NodeLost(self._clock.now(), node))

    def recover(self) -> dict[str, Recovered]:
        """After a daemon was killed: kill the tasks it left running, then judge each job's last attempt.

        Call once at daemon start, before any job starts. A job whose last attempt's
        workers all left exit code 0 finished while the daemon was away: it must not
        run again. One whose task left another code failed; one whose tasks left none
        (killed here, or by anyone) was interrupted and resumes from its checkpoint.
        """
        killed = kill_orphans(self.run_dir)
        self.ledger.mark("orphans-killed", tasks=killed)  # from here on, nothing the journal lacks holds a device
        if killed:
            log.info("recovery: killed %d task(s) a previous daemon left running: %s", len(killed), ", ".join(killed))
        return judge_attempts(self.run_dir)

    def cleanup_orphans(self) -> list[str]:
        """Kill task processes a previous engine on this run_dir left running; `job/role-index` of each."""
        return kill_orphans(self.run_dir)

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
            task.proc.wait()
            task.poll()
        for job in self._jobs.values():
            self._release(job)
        self._jobs.clear()
        self.prestart = 0
        for spare in self._spares:
            kill_group(spare.pid, signal.SIGKILL)
            spare.wait()
        self._spares.clear()

    def job_dir(self, job_id: str) -> Path:
        return self.run_dir / job_id

    def pids(self, job_id: str) -> dict[str, int]:
        """`role-index` -> pid of the job's running tasks."""
        job = self._jobs.get(job_id)
        return {t.name: t.pid for t in job.live()} if job else {}

    def tasks(self, job_id: str) -> list[Task]:
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
                                                   attempt=self._last_attempt(action.job_id))
        job.spec = action.spec
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
        """Stop the job's tasks with `sig`; launch `allocation` (if any) once they are gone."""
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
        """Launch now if the ledger has room on every node, else wait for stopping tasks to free it."""
        problem = self._cannot_launch(job.spec, allocation)
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

    def _cannot_launch(self, spec: JobSpec, allocation: Allocation) -> str | None:
        """Why this job can never start as asked (the user's to fix), else None."""
        if not spec.command:
            return "spec.command is empty; the local engine runs the job's command (add `command:`)"
        cwd = self._cwd(spec)
        if not cwd.is_dir():
            return f"spec.workdir {spec.workdir!r}: no such folder (looked in {cwd})"
        program = self._command(spec)[0]
        found = (cwd / program).is_file() if "/" in program else shutil.which(program, path=self._env_path(spec))
        if not found:
            return (f"spec.command: program {program!r} not found (in {cwd} or on PATH); "
                    "give an absolute path or install it")
        lost = [n for n in allocation.nodes if n in self.revoked or n not in self._cluster]
        if lost:
            return f"cannot launch on unknown or revoked node {lost[0]}"
        return None

    def _cwd(self, spec: JobSpec) -> Path:
        return self.base_dir / spec.workdir if spec.workdir else self.base_dir

    def _command(self, spec: JobSpec) -> list[str]:
        command = list(spec.command)
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        return command

    def _base_env(self) -> dict[str, str]:
        """This process's environment without the daemon's secrets, plus the engine's extra variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIX) and k not in self.secret_env}
        env.update(self.extra_env)
        return env

    def _env_path(self, spec: JobSpec) -> str | None:
        return dict(spec.env).get("PATH") or self.extra_env.get("PATH") or os.environ.get("PATH")

    def _refill_spares(self) -> None:
        """Keep `prestart` spare interpreters; only while no job is starting, not to slow its start."""
        self._spares = [p for p in self._spares if p.poll() is None]
        if len(self._spares) >= self.prestart:
            return
        if any(j.phase is Phase.RUNNING and not j.running_seen for j in self._jobs.values()):
            return
        env = self._base_env()
        while len(self._spares) < self.prestart:
            self._spares.append(start_spare(sys.executable, self.base_dir, env))

    def _take_spare(self, command: Sequence[str]) -> subprocess.Popen[bytes] | None:
        if command[0] != sys.executable or len(command) < 2 or (
                command[1].startswith("-") and command[1] not in ("-m", "-c")):
            return None  # not `python script.py ...`, `python -m mod ...` or `python -c code ...`
        while self._spares:
            spare = self._spares.pop(0)
            if spare.poll() is None:
                return spare
        return None

    def _last_attempt(self, job_id: str) -> int:
        """Attempts already on disk (a restarted daemon continues the numbering, never rereads old reports)."""
        numbers = [int(p.stem.split("-")[1]) for p in (self.job_dir(job_id) / "reports").glob("attempt-*.jsonl")
                   if p.stem.split("-")[1].isdigit()]
        return max(numbers, default=0)

    def _release(self, job: _Job) -> None:
        """Give back what the job's tasks booked; only once their processes are gone."""
        for task in job.tasks:
            self.ledger.give_back(task.node, task.need, task.cores, task.gpus, f"{job.job_id}/{task.name}")
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
                task.proc.wait()
                task.poll()
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
        job.folder = ProgressFolder()
        job_dir = self.job_dir(job.job_id)
        report_file = job_dir / "reports" / f"attempt-{job.attempt}.jsonl"
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.touch()  # marks the attempt as used even if the task never reports
        job.tail = LineTail(report_file)
        workers = [p.node for p in allocation.tasks if p.role is Role.WORKER]
        servers = [p.node for p in allocation.tasks if p.role is Role.PS]
        write_manifest(job_dir, job.attempt, [f"ps-{i}" for i in range(len(servers))]
                       + [f"worker-{i}" for i in range(len(workers))])
        shared = {
            **self._base_env(),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(len(workers)),
            "TM_JOB_ID": job.job_id, "TM_ATTEMPT": str(job.attempt),
            "TM_CHECKPOINT_DIR": str(job_dir / "checkpoint"), "TM_CHECKPOINT_EVERY": str(spec.checkpoint_every),
            "TM_ARCH": spec.architecture.value, "TM_NUM_WORKERS": str(len(workers)), "TM_NUM_PS": str(len(servers)),
            "PYTHONUNBUFFERED": "1",
        }
        if spec.target.steps:
            shared["TM_TARGET_STEPS"] = str(spec.target.steps)
        if spec.architecture is Architecture.PARAMETER_SERVER:
            shared["TM_PS_ADDRS"] = ",".join(f"127.0.0.1:{free_port()}" for _ in servers)
        shared.update(dict(spec.env))
        command = self._command(spec)
        cwd = self._cwd(spec)
        per_node: dict[str, int] = {}
        for role, nodes in ((Role.PS, servers), (Role.WORKER, workers)):
            need = spec.roles[role].resources if role in spec.roles else Resources()
            for index, node in enumerate(nodes):
                name = f"{role.value}-{index}"
                cores, gpus = self.ledger.take(node, need, f"{job.job_id}/{name}")
                local_rank = per_node.get(node, 0)
                per_node[node] = local_rank + 1
                env = dict(shared)
                env.update({
                    "TM_ROLE": role.value, "TM_INDEX": str(index), "TM_NODE": node, "TM_CPUS": str(len(cores)),
                    "RANK": str(index), "LOCAL_RANK": str(local_rank),
                    "OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores)),
                    "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
                })
                if role is Role.WORKER and index == 0:
                    env["TM_REPORT_FILE"] = str(report_file)
                else:
                    env.pop("TM_REPORT_FILE", None)
                try:
                    task = launch(job_id=job.job_id, role=role.value, index=index, node=node, attempt=job.attempt,
                                  command=command, cwd=cwd, env=env, cores=cores, gpus=gpus, job_dir=job_dir,
                                  need=need, spare=self._take_spare(command))
                except BaseException:
                    self.ledger.give_back(node, need, cores, gpus, f"{job.job_id}/{name}")
                    raise
                job.tasks.append(task)
        job.phase = Phase.RUNNING

    def _poll(self) -> list[Event]:
        events, self._events = self._events, []
        for job in list(self._jobs.values()):
            try:
                events.extend(self._poll_job(job))
                if job.phase is Phase.WAITING:  # in arrival order: the first planned gets freed room first
                    self._poll_waiting(job)
            except Exception as exc:  # an engine bug must not wedge the scheduler: fail this job, loudly
                log.exception("local engine: polling job %s failed", job.job_id)
                self._abandon(job.job_id, f"engine error: {exc!r}")
        events.extend(self._events)
        self._events = []
        if self.prestart:
            self._refill_spares()
        if time.monotonic() >= self._next_rotation:
            self._next_rotation = time.monotonic() + 1.0
            for job in self._jobs.values():
                for task in job.live():
                    rotate_log(task.log_path, self.log_max_bytes)
        return events

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
        if job.tail is not None and job.phase in (Phase.RUNNING, Phase.DRAINING):
            progress = job.folder.fold(job.tail.read())
            if progress is not None:
                if progress.checkpoint_step is not None:
                    job.checkpoint_step = progress.checkpoint_step
                if job.phase is Phase.RUNNING:
                    if not job.running_seen:
                        job.running_seen = True
                        out.append(JobRunning(now, job.job_id, job.allocation))
                    out.append(Report(now, job.job_id, progress.step, loss=progress.loss,
                                      samples_per_s=progress.samples_per_s, steps_per_s=progress.steps_per_s,
                                      allocation=job.allocation))
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
        for task in job.tasks:
            code = task.poll()
            if code not in (None, 0):
                for other in job.live():
                    other.signal(signal.SIGKILL)
                job.phase = Phase.BROKEN
                what = "stopped unexpectedly" if code == EXIT_PREEMPTED else f"exited with code {code}"
                return [TaskFailed(now, job.job_id, f"{task.name} {what} (log: {task.log_path})")]
        workers = [t for t in job.tasks if t.role == Role.WORKER.value]
        if not workers or any(t.poll() != 0 for t in workers):
            return []
        out: list[Event] = []
        progress = job.folder.fold(job.tail.read()) if job.tail is not None else None
        if progress is not None:  # the last lines, written at exit
            out.append(Report(now, job.job_id, progress.step, loss=progress.loss,
                              samples_per_s=progress.samples_per_s, steps_per_s=progress.steps_per_s,
                              allocation=job.allocation))
        for task in job.live():  # parameter servers that outlived their workers
            task.signal(signal.SIGKILL)
        for task in job.tasks:
            task.proc.wait()
            task.poll()
        self._release(job)
        del self._jobs[job.job_id]
        out.append(JobFinished(now, job.job_id, succeeded=True, message="all workers finished"))
        return out
