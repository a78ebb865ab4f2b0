"""The Ray actor that runs one task on its node: launch, supervise, signal, and read back its files.

It starts the command exactly as the local engine does (`local.tasks.launch`:
its own session, pinned cores, a log, a pid file and an exit-code file), so a
task behaves the same on both engines. A guard process holds a pipe from the
actor: if the actor dies (its node is removed, `ray.kill`), the pipe closes
and the guard SIGKILLs the task's process group, so no training process
outlives its actor. Progress and log lines travel back to the daemon through
calls on this actor, never through a filesystem the daemon shares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

from trainmaster.engines.gang import TaskLaunch
from trainmaster.engines.local.tasks import Task, kill_group, launch
from trainmaster.engines.progress import LineTail

SECRET_PREFIX = "TRAINMASTER_"
# `sh -c GUARD PGID`: wait for the actor's pipe to close, then kill the task's process group.
GUARD = 'read _ ; kill -9 -- -"$0" 2>/dev/null; exit 0'


# Ports handed to rendezvous and parameter servers: above Ray's worker ports (10002-19999 by default) and below
# Linux's ephemeral range (32768+), where a port free now is seldom taken before the task binds it. A port from
# bind(0) comes from the ephemeral range that Ray's own processes keep binding on the same node: a task that
# connected to one of those instead of its rank 0 died in torch ("terminate called without an active exception").
TASK_PORTS = range(20000, 32768)


def free_port_here() -> tuple[str, int]:
    """This node's address and a port free on it now (rendezvous, parameter servers); run as a Ray task."""
    import random

    import ray

    address = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    for port in random.sample(TASK_PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return address, port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the range is crowded: any free port
        s.bind(("", 0))
        found: int = s.getsockname()[1]
    return address, found


def rendezvous_env(found: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """MASTER_ADDR/MASTER_PORT from the first (address, port), TM_PS_ADDRS from the rest (when any)."""
    if not found:
        return {}
    (ip, port), servers = found[0], found[1:]
    env = {"MASTER_ADDR": str(ip), "MASTER_PORT": str(port)}
    if servers:
        env["TM_PS_ADDRS"] = ",".join(f"{a}:{p}" for a, p in servers)
    return env


class TaskActor:
    """One task (or, with no task, a reader of a node's files); used as a threaded Ray actor."""

    def __init__(self) -> None:
        self.task: Task | None = None
        self.guard: subprocess.Popen[bytes] | None = None
        self.progress: LineTail | None = None
        self.lock = threading.Lock()  # one reader of the progress file at a time: no line twice, none lost

    def run(self, task: TaskLaunch, cwd: str, job_dir: str, *rendezvous: tuple[str, int]) -> tuple[int, str]:
        """Start the task's process on this node; its pid and the Ray id of the node it runs on. `rendezvous`:
        the rank-0 node's (address, free port), then each parameter server's (`free_port_here` answers)."""
        with contextlib.suppress(OSError):  # Ray runs workers niced (RAY_worker_niceness); a task trains at 0
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        here = sorted(os.sched_getaffinity(0))
        cores = tuple(sorted({here[c % len(here)] for c in task.cores})) if task.cores and here else ()
        env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIX)}
        env.update(rendezvous_env(rendezvous))
        env.update(task.env)  # the job's own `env` may still set them
        task = dataclasses.replace(task, cores=cores, env=env)
        Path(job_dir).mkdir(parents=True, exist_ok=True)
        self.task = launch(task, cwd=Path(cwd), job_dir=Path(job_dir))
        self.guard = subprocess.Popen(["/bin/sh", "-c", GUARD, str(self.task.pid)], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        report = task.env.get("TM_REPORT_FILE")
        self.progress = LineTail(Path(report)) if report else None
        import ray

        return self.task.pid, str(ray.get_runtime_context().get_node_id())

    def wait(self) -> tuple[int, list[dict[str, Any]]]:
        """Block until the task's process ends: its exit code (negative: killed by that signal) and the
        progress lines it wrote last, so the actor can be killed at once (freeing its Ray resources)."""
        assert self.task is not None, "run() first"
        self.task.reap()
        code = self.task.poll()
        if self.guard is not None:  # the group is gone: the guard must not kill a recycled one later
            self.guard.kill()
            self.guard.wait()
        return (code if code is not None else -signal.SIGKILL), self.read_progress()

    def signal(self, sig: int) -> None:
        if self.task is not None:
            self.task.signal(signal.Signals(sig))

    def stop(self) -> None:
        """SIGKILL the task's process group and wait for it (a dead daemon's task, or shutdown)."""
        if self.task is not None and self.task.poll() is None:
            kill_group(self.task.pid, signal.SIGKILL)
            self.task.reap()

    def read_progress(self) -> list[dict[str, Any]]:
        """Progress lines the task (the job's chief) wrote since the last call."""
        with self.lock:
            return self.progress.read() if self.progress is not None else []

    def file_size(self, path: str) -> int | None:
        """The size of the file at `path` on this node; None when there is none."""
        try:
            return os.stat(path).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes of the file at `path` on this node from `offset` (b"" past its end or if gone)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)
        return b""
