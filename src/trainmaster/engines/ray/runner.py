"""`RayRunner`: the gang engine's `TaskRunner` with every task a Ray actor pinned to its node.

Each task is a detached actor named `<job>/<role>-<index>/<attempt>` in the
runner's namespace, created with the task's resources and a hard node
affinity, so Ray itself refuses to double-book a node and a restarted daemon
finds what its predecessor left (`recover`). The tasks of one start come up
together: `start` creates each actor and asks it to run (the rendezvous port
lookups are handed to `run` by Ray, not awaited), `confirm` waits for all of
them at once. A placement Ray cannot realise
within `place_timeout` seconds fails the start (`TaskFailed`, retried by the
controller up to the job's maxRestarts), never waits forever. The actor runs
the process (`actor.TaskActor`); the runner watches one `wait` call per task,
pulls the chief's progress lines through the actor, and kills an actor
the moment its process has ended (its last progress lines come with the
exit code), so Ray frees its resources for the next start at once.

Paths (under `run_dir`, which every node must see at the same path, e.g. an
NFS or ReadWriteMany volume: checkpoints live there): as on the local engine,
`<job>/checkpoint/`, `<job>/<role>-<index>.log`, `<job>/reports/attempt-<n>.jsonl`,
`<job>/exits/attempt-<n>/`. The daemon reads progress through the actors and
logs on each task's node through Ray (`logs.py`; the shared path only for a
task a previous daemon ran, or whose node is gone).
"""

from __future__ import annotations

import errno
import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from trainmaster.core.job import JobSpec
from trainmaster.engines.base import Recovered
from trainmaster.engines.gang import Attempt, RunningTask, TaskLaunch, as_this_python
from trainmaster.engines.local.recovery import _last_attempt, judge_attempts, write_manifest
from trainmaster.engines.ray.actor import TaskActor, free_port_here
from trainmaster.engines.ray.logs import LogHost, RayFiles
from trainmaster.engines.ray.nodes import RayNode
from trainmaster.engines.task_logs import LocalFiles

log = logging.getLogger("trainmaster.engine")
ActorHandle = Any  # ray.actor.ActorHandle: untyped in Ray


@dataclass
class RayTask:
    """A task running under its actor (a `RunningTask` of the gang engine).

    Started in two steps: `RayRunner.start` creates the actor and asks it to
    run the process (`run_ref`); `RayRunner.confirm` waits for every task of
    the start at once and fills in `pid`, `node_id` and `exit_ref`. Until then
    a signal or reap kills the actor (its guard kills the process, if any).
    """

    launch: TaskLaunch
    actor: ActorHandle
    log_path: str
    run_ref: Any = None
    node_id: str = ""  # where Ray runs it, as the actor reports
    pid: int = 0
    exit_ref: Any = None
    code: int | None = None
    tail: list[dict[str, object]] = field(default_factory=list)  # progress lines read at its exit
    killed: bool = False

    @property
    def where(self) -> str:
        return f"{self.log_path} on node {self.launch.node}"

    def poll(self) -> int | None:
        if self.code is None and self.exit_ref is not None:
            ready, _ = ray.wait([self.exit_ref], timeout=0)
            if ready:
                self._settle()
        return self.code

    def _settle(self, timeout: float | None = None) -> None:
        """Take the exit code (and last progress lines), then kill the actor: its Ray resources are free."""
        try:
            code, self.tail = ray.get(self.exit_ref, timeout=timeout)
            self.code = int(code)
        except GetTimeoutError:
            return
        except RayError:  # the actor died with its node (or was killed): as good as SIGKILL
            self.code = -signal.SIGKILL
        self.kill()

    def kill(self) -> None:
        if not self.killed:
            self.killed = True
            ray.kill(self.actor)

    def signal(self, sig: signal.Signals) -> None:
        if self.exit_ref is None:  # not confirmed running: nothing to ask politely
            self.kill()
            self.code = -signal.SIGKILL
        elif self.poll() is None:
            self.actor.signal.remote(int(sig))

    def reap(self) -> None:
        if self.code is None and self.exit_ref is not None:
            self._settle(timeout=30.0)
        if self.code is None:  # the actor does not answer (or never ran it): kill it (its guard kills the process)
            self.kill()
            self.code = -signal.SIGKILL


@dataclass
class ChiefProgress:
    """The job's progress lines, pulled through the chief's actor (set once worker 0 starts)."""

    task: RayTask | None = None

    def read(self) -> list[dict[str, object]]:
        lines: list[dict[str, object]]
        if self.task is None:
            return []
        if self.task.killed:  # ended: the lines it left at exit, once
            lines, self.task.tail = self.task.tail, []
            return lines
        try:
            lines = ray.get(self.task.actor.read_progress.remote(), timeout=10.0)
        except RayError:
            return []
        return lines


@dataclass
class RayRunner:
    """Tasks as Ray actors (see the module docstring)."""

    run_dir: Path
    nodes: dict[str, RayNode]
    base_dir: Path = field(default_factory=Path.cwd)
    namespace: str = "trainmaster"
    place_timeout: float = 60.0
    _tasks: list[RayTask] = field(default_factory=list)
    _latest: dict[tuple[str, str], RayTask] = field(default_factory=dict)
    _chiefs: dict[tuple[str, int], ChiefProgress] = field(default_factory=dict)
    _rendezvous: dict[tuple[str, int], list[Any]] = field(default_factory=dict)  # (job, attempt) -> port refs
    _readers: dict[str, ActorHandle] = field(default_factory=dict)  # node id -> a log reader there
    _lock: threading.Lock = field(default_factory=threading.Lock)  # `_latest` and `_readers`: API threads read logs

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir = Path(self.base_dir).resolve()
        self._actor: Any = ray.remote(TaskActor)  # Ray's actor-class typing does not follow .options()
        self._free_port: Any = ray.remote(num_cpus=0)(free_port_here)

    def job_dir(self, job_id: str) -> Path:
        return self.run_dir / job_id

    # -- TaskRunner ---------------------------------------------------------
    def cannot_start(self, spec: JobSpec) -> str | None:
        if not spec.command:
            return "spec.command is empty; the ray engine runs the job's command (add `command:`)"
        cwd = self.base_dir / spec.workdir if spec.workdir else self.base_dir
        if not cwd.is_dir():
            return f"spec.workdir {spec.workdir!r}: no such folder (looked in {cwd}; every node needs it there)"
        return None

    def command(self, spec: JobSpec) -> tuple[str, ...]:
        """`python` is this interpreter: every node runs the same image (the same path)."""
        return as_this_python(spec)

    def begin(self, job_id: str, attempt: int, workers: Sequence[str], servers: Sequence[str]) -> Attempt:
        job_dir = self.job_dir(job_id)
        report_file = job_dir / "reports" / f"attempt-{attempt}.jsonl"
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.touch()  # marks the attempt as used even if the task never reports
        write_manifest(job_dir, attempt, [f"ps-{i}" for i in range(len(servers))]
                       + [f"worker-{i}" for i in range(len(workers))])
        # A free port on the rank-0 node and on each server's: asked there now, not waited for. Ray hands the
        # answers to each task's `run` (the actor fills in MASTER_ADDR/PORT and TM_PS_ADDRS), so the lookups
        # overlap the actors' starts.
        self._rendezvous[job_id, attempt] = [
            self._free_port.options(scheduling_strategy=self._pin(self._node(n).node_id)).remote()
            for n in [workers[0], *servers]]
        env = {"TM_CHECKPOINT_DIR": str(job_dir / "checkpoint")}
        progress = self._chiefs[job_id, attempt] = ChiefProgress()
        return Attempt(env=env, chief_env={"TM_REPORT_FILE": str(report_file)}, progress=progress)

    def start(self, launch: TaskLaunch) -> RunningTask:
        """Create the task's actor and ask it to run the process; `confirm` waits for it (with the others)."""
        node = self._node(launch.node)
        need = launch.need
        name = f"{launch.job_id}/{launch.name}/{launch.attempt}"
        actor: ActorHandle = self._actor.options(
            name=name, namespace=self.namespace, lifetime="detached", max_concurrency=4, max_restarts=0,
            num_cpus=need.cpu / 1000, num_gpus=need.gpu, memory=need.memory or None,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote()
        cwd = self.base_dir / launch.workdir if launch.workdir else self.base_dir
        job_dir = self.job_dir(launch.job_id)
        rendezvous = self._rendezvous.get((launch.job_id, launch.attempt), [])
        task = RayTask(launch, actor, str(job_dir / f"{launch.name}.log"),
                       run_ref=actor.run.remote(launch, str(cwd), str(job_dir), *rendezvous))
        self._tasks.append(task)
        return task

    def confirm(self, tasks: Sequence[RunningTask]) -> None:
        """Wait for every task of one start at once (Ray places and starts their actors in parallel), within
        `place_timeout`; a task Ray cannot place or start fails the whole start with the reason."""
        started = [t for t in tasks if isinstance(t, RayTask) and t.exit_ref is None and t.run_ref is not None]
        for t in started:
            self._rendezvous.pop((t.launch.job_id, t.launch.attempt), None)  # the actors hold the answers now
        if not started:
            return
        _, waiting = ray.wait([t.run_ref for t in started], num_returns=len(started), timeout=self.place_timeout)
        if waiting:
            late = [t.launch for t in started if t.run_ref in waiting]
            names = ", ".join(f"{t.name} on node {t.node}" for t in late)
            raise OSError(errno.ETIMEDOUT, f"Ray could not place {names} within {self.place_timeout:g}s "
                          "(its resources are held outside trainmaster?)")
        for task in started:
            try:
                pid, node_id = ray.get(task.run_ref)
            except RayError as exc:
                cause = exc.cause if hasattr(exc, "cause") and isinstance(exc.cause, OSError) else None
                if cause is not None:
                    raise cause from None
                raise OSError(errno.EIO, f"{task.launch.name} on node {task.launch.node}: {exc}") from None
            task.pid, task.node_id, task.exit_ref = int(pid), str(node_id), task.actor.wait.remote()
            launch = task.launch
            with self._lock:
                self._latest[launch.job_id, launch.name] = task
            chief = self._chiefs.get((launch.job_id, launch.attempt))
            if chief is not None and launch.role.value == "worker" and launch.index == 0:
                chief.task = task

    def tick(self, live: Sequence[RunningTask], starting: bool) -> None:
        """Forget ended tasks (each task's actor is killed the moment its exit is seen)."""
        self._tasks = [t for t in self._tasks if not t.killed]
        self._chiefs = {k: c for k, c in self._chiefs.items() if c.task is None or not c.task.killed}

    def last_attempt(self, job_id: str) -> int:
        return _last_attempt(self.job_dir(job_id)) or 0

    def recover(self) -> Mapping[str, Recovered]:
        """Kill the actors (and so the processes) a dead daemon left in this namespace, then judge each job's
        last attempt from the exit codes its tasks left on the shared run_dir."""
        killed = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry.get("namespace") != self.namespace:
                continue
            try:
                actor = ray.get_actor(entry["name"], namespace=self.namespace)
                ray.get(actor.stop.remote(), timeout=30.0)
            except (RayError, ValueError):
                pass  # already dead, or its node is gone with its processes
            else:
                ray.kill(actor)
            killed.append(entry["name"])
        if killed:
            log.info("recovery: killed %d Ray actor(s) a previous daemon left: %s", len(killed), ", ".join(killed))
        return judge_attempts(self.run_dir)

    def close(self) -> None:
        for task in self._tasks:
            task.kill()
        self._tasks.clear()
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            ray.kill(reader)

    # -- logs (`logs.Hosts`) ------------------------------------------------------
    def log_files(self, job_id: str) -> RayFiles:
        """The job's task logs, read on the nodes that ran its tasks (see `engines/ray/logs.py`)."""
        return RayFiles(self, job_id, LocalFiles(self.job_dir(job_id)))

    def log_host(self, job_id: str, task: str) -> LogHost | None:
        with self._lock:
            current = self._latest.get((job_id, task))
        if current is None:
            return None
        return LogHost(None if current.killed else current.actor, current.node_id, current.log_path)

    def known_tasks(self, job_id: str) -> list[str]:
        with self._lock:
            return sorted(task for job, task in self._latest if job == job_id)

    def reader(self, node_id: str) -> ActorHandle:
        """A reader actor on the node (no resources), made once and kept until it fails or the engine closes."""
        with self._lock:
            if node_id not in self._readers:
                self._readers[node_id] = self._actor.options(num_cpus=0, max_concurrency=4,
                                                             scheduling_strategy=self._pin(node_id)).remote()
            return self._readers[node_id]

    def forget_reader(self, node_id: str) -> None:
        with self._lock:
            reader = self._readers.pop(node_id, None)
        if reader is not None:
            ray.kill(reader)

    # -- internals -------------------------------------------------------------
    def _node(self, name: str) -> RayNode:
        node = self.nodes.get(name)
        if node is None:
            raise OSError(errno.EHOSTUNREACH, f"node {name} is not a Ray node of this cluster (anymore)")
        return node

    def _pin(self, node_id: str) -> NodeAffinitySchedulingStrategy:
        return NodeAffinitySchedulingStrategy(node_id, soft=False)

