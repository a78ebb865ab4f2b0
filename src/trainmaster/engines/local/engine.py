"""The `local` engine: every task a real process on this machine, driven by the same controller.

Life of a job: START launches one process per task (own session, pinned to
its virtual node's cores, a free rendezvous port per launch). RESIZE and
STOP send SIGTERM; `trainmaster.train` checkpoints and exits with
EXIT_PREEMPTED; once every task is gone the engine relaunches at the new
size (or reports `JobStopped`), escalating to SIGKILL after `grace` seconds.
A launch is `JobRunning` at its first progress report (or, for a command
that never reports, once all its tasks stayed up `silent_running_after` s).
A task that dies on its own breaks the gang: the engine kills the rest and
reports `TaskFailed`; the controller answers RESTART (same allocation, next
attempt, from the checkpoint) until `maxRestarts`. `revoke(node)` SIGKILLs
a virtual node's tasks at once, as a vanished transient server would.

Paths: logs `run_dir/<job>/<role>-<index>.log` (appended across attempts),
checkpoints `run_dir/<job>/checkpoint/` (or the job's TM_CHECKPOINT_DIR),
progress `run_dir/<job>/reports/attempt-<n>.jsonl`, pid files
`run_dir/<job>/pids/<role>-<index>.pid`. A relative `spec.workdir` is taken
from `base_dir` (default: the current directory); a command starting with
`python`/`python3` runs under this interpreter, so the job sees the same
environment; with `prestart=N` such commands are handed to one of N
interpreters kept ready with torch imported (`warm.py`), which takes the
seconds of `import torch` off every start, restart and resize. After a
daemon was killed, call `cleanup_orphans()` before starting jobs: it kills
the tasks the dead daemon left behind. Not thread-safe: drive an engine from
one thread.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.clock import Clock, RealClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, JobFinished, JobRunning, JobStopped, NodeLost, Report, TaskFailed
from trainmaster.core.job import Architecture, JobSpec, Role
from trainmaster.engines.local.machine import Devices, local_cluster
from trainmaster.engines.local.reports import LineTail, ProgressFolder
from trainmaster.engines.local.tasks import Task, kill_group, kill_orphans, launch, start_spare

EXIT_PREEMPTED = 75  # trainmaster.train.EXIT_PREEMPTED (engines may not import train/)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class _Job:
    job_id: str
    spec: JobSpec
    allocation: Allocation = EMPTY
    attempt: int = 0
    tasks: list[Task] = field(default_factory=list)
    phase: str = "idle"  # idle | running | draining | broken
    next_allocation: Allocation | None = None  # launch this once drained (None: stay stopped)
    drain_deadline: float = 0.0
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
                 silent_running_after: float = 30.0) -> None:
        self._cluster = cluster or local_cluster()
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._clock: Clock = clock or RealClock()
        self.base_dir = Path(base_dir or Path.cwd()).resolve()
        self.grace = grace
        self.poll_interval = poll_interval
        self.silent_running_after = silent_running_after
        self.extra_env = dict(env or {})
        self.devices = Devices.for_cluster(self._cluster)
        self.revoked: set[str] = set()
        self._jobs: dict[str, _Job] = {}
        self._events: list[Event] = []
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
        return not self._events and not any(j.live() or j.phase == "draining" for j in self._jobs.values())

    def apply(self, actions: Sequence[Action]) -> None:
        for action in actions:
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
                job.phase = "broken"
                job.next_allocation = None
        self._events.append(NodeLost(self._clock.now(), node))

    def cleanup_orphans(self) -> list[str]:
        """Kill task processes a previous engine on this run_dir left running (its daemon was kill -9'd).

        Call once at daemon start, before any job starts; returns `job/role-index` of each killed task.
        Their jobs restart from their checkpoints when the controller starts them again.
        """
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

    # -- internals -------------------------------------------------------------
    def _replace(self, job: _Job, allocation: Allocation | None, sig: signal.Signals, *, announce: bool) -> None:
        """Stop the job's tasks with `sig`; launch `allocation` (if any) once they are gone."""
        live = job.live()
        job.next_allocation = allocation or None
        job.announce_stop = announce and bool(live)
        if live:
            for task in live:
                task.signal(sig)
            if job.phase != "draining" or sig is signal.SIGKILL:
                job.drain_deadline = time.monotonic() + (0.0 if sig is signal.SIGKILL else self.grace)
            job.phase = "draining"
            return
        self._release(job)
        job.phase = "idle"
        if allocation:
            self._launch(job, allocation)

    def _refill_spares(self) -> None:
        """Keep `prestart` spare interpreters; only while no job is starting, not to slow its start."""
        self._spares = [p for p in self._spares if p.poll() is None]
        if len(self._spares) >= self.prestart:
            return
        if any(j.phase == "running" and not j.running_seen for j in self._jobs.values()):
            return
        env = {**os.environ, **self.extra_env}
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
        for task in job.tasks:
            self.devices.give_back(task.cores, task.gpus)
        job.tasks = []

    def _fail(self, job: _Job, message: str) -> None:
        self._events.append(JobFinished(self._clock.now(), job.job_id, succeeded=False, message=message))
        job.phase = "idle"

    def _launch(self, job: _Job, allocation: Allocation) -> None:
        spec = job.spec
        if not spec.command:
            self._fail(job, "spec.command is empty; the local engine runs the job's command (add `command:`)")
            return
        cwd = self.base_dir / spec.workdir if spec.workdir else self.base_dir
        if not cwd.is_dir():
            self._fail(job, f"spec.workdir {spec.workdir!r}: no such folder under {self.base_dir}")
            return
        lost = [n for n in allocation.nodes if n in self.revoked or n not in self._cluster]
        if lost:
            self._fail(job, f"cannot launch on unknown or revoked node {lost[0]}")
            return
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
        spec_env = dict(spec.env)
        shared = {
            **os.environ, **self.extra_env,
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
        shared.update(spec_env)
        command = list(spec.command)
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        per_node: dict[str, int] = {}
        for role, nodes in ((Role.PS, servers), (Role.WORKER, workers)):
            resources = spec.roles[role].resources if role in spec.roles else None
            for index, node in enumerate(nodes):
                assert resources is not None
                cores, gpus = self.devices.take(node, resources.cpu, resources.gpu)
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
                job.tasks.append(launch(job_id=job.job_id, role=role.value, index=index, node=node,
                                        attempt=job.attempt, command=command, cwd=cwd, env=env, cores=cores,
                                        gpus=gpus, job_dir=job_dir, spare=self._take_spare(command)))
        job.phase = "running"

    def _poll(self) -> list[Event]:
        events, self._events = self._events, []
        for job in list(self._jobs.values()):
            events.extend(self._poll_job(job))
        if self.prestart:
            self._refill_spares()
        return events

    def _poll_job(self, job: _Job) -> list[Event]:
        now = self._clock.now()
        out: list[Event] = []
        if job.tail is not None and job.phase in ("running", "draining"):
            progress = job.folder.fold(job.tail.read())
            if progress is not None:
                if progress.checkpoint_step is not None:
                    job.checkpoint_step = progress.checkpoint_step
                if job.phase == "running":
                    if not job.running_seen:
                        job.running_seen = True
                        out.append(JobRunning(now, job.job_id, job.allocation))
                    out.append(Report(now, job.job_id, progress.step, loss=progress.loss,
                                      samples_per_s=progress.samples_per_s, steps_per_s=progress.steps_per_s,
                                      allocation=job.allocation))
        if job.phase == "running" and not job.running_seen and \
                time.monotonic() - job.launched_at >= self.silent_running_after and len(job.live()) == len(job.tasks):
            job.running_seen = True  # a command that never reports: running once it has stayed up a while
            out.append(JobRunning(now, job.job_id, job.allocation))
        if job.phase == "draining":
            if job.live() and time.monotonic() >= job.drain_deadline:
                for task in job.live():
                    task.signal(signal.SIGKILL)
            if not job.live():
                self._release(job)
                job.phase = "idle"
                if job.announce_stop:
                    out.append(JobStopped(now, job.job_id, job.checkpoint_step))
                if job.next_allocation:
                    self._launch(job, job.next_allocation)
                    out.extend(self._events)
                    self._events = []
        elif job.phase == "running":
            out.extend(self._check_exits(job, now))
        elif job.phase in ("broken", "idle") and not job.live():
            self._release(job)
        return out

    def _check_exits(self, job: _Job, now: float) -> list[Event]:
        for task in job.tasks:
            code = task.poll()
            if code not in (None, 0):
                for other in job.live():
                    other.signal(signal.SIGKILL)
                job.phase = "broken"
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
