"""The `local` engine: the shared gang lifecycle (`engines/gang.py`) with every task a process on this machine.

The machine can be split into virtual nodes (`machine.local_cluster`); a task
is pinned to its node's cores (and GPUs through `CUDA_VISIBLE_DEVICES`).

Paths: logs `run_dir/<job>/<role>-<index>.log` (appended across attempts,
capped at `log_max_bytes` with one older part in `.log.1`), checkpoints
`run_dir/<job>/checkpoint/`, progress `run_dir/<job>/reports/attempt-<n>.jsonl`,
pid files `run_dir/<job>/pids/<role>-<index>.pid`, exit codes
`run_dir/<job>/exits/attempt-<n>/<role>-<index>`. A relative `spec.workdir` is
taken from `base_dir` (default: the current directory); a command starting
with `python`/`python3` runs under this interpreter; with `prestart=N` such
commands are handed to one of N interpreters kept ready with torch imported
(`warm.py`). Tasks get this process's environment minus the daemon's secrets
(`TRAINMASTER_*` and the `secret_env` names). After a daemon was killed,
`recover()` (before starting jobs) kills the tasks the dead daemon left behind
and tells how each job's last attempt ended.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from trainmaster.core.clock import Clock
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec
from trainmaster.core.market import Market
from trainmaster.engines.base import Recovered
from trainmaster.engines.gang import Attempt, GangEngine, RunningTask, TaskLaunch, as_this_python
from trainmaster.engines.local.machine import local_cluster, machine_cores
from trainmaster.engines.local.recovery import judge_attempts, write_manifest
from trainmaster.engines.local.tasks import Task, kill_group, kill_orphans, launch, rotate_log, start_spare
from trainmaster.engines.progress import LineTail
from trainmaster.engines.task_logs import LocalFiles, stream_logs

log = logging.getLogger("trainmaster.engine")
LOG_MAX_BYTES = 100 * 2**20  # per task, both parts together
SECRET_PREFIX = "TRAINMASTER_"  # the daemon's own settings (its token above all) never reach a job


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SubprocessRunner:
    """Tasks as processes on this machine: the `TaskRunner` of the local engine."""

    def __init__(self, run_dir: Path, *, base_dir: Path | None = None, env: Mapping[str, str] | None = None,
                 prestart: int = 0, log_max_bytes: int = LOG_MAX_BYTES, secret_env: Iterable[str] = ()) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir = Path(base_dir or Path.cwd()).resolve()
        self.extra_env = dict(env or {})
        self.secret_env = frozenset(secret_env)
        self.log_max_bytes = log_max_bytes
        self.prestart = prestart  # interpreters kept ready with torch imported, for Python task commands
        self._spares: list[subprocess.Popen[bytes]] = []
        self._next_rotation = 0.0
        self._refill_spares()

    def job_dir(self, job_id: str) -> Path:
        return self.run_dir / job_id

    # -- TaskRunner ---------------------------------------------------------
    def cannot_start(self, spec: JobSpec) -> str | None:
        if not spec.command:
            return "spec.command is empty; the local engine runs the job's command (add `command:`)"
        cwd = self._cwd(spec)
        if not cwd.is_dir():
            return f"spec.workdir {spec.workdir!r}: no such folder (looked in {cwd})"
        program = self.command(spec)[0]
        path = dict(spec.env).get("PATH") or self.extra_env.get("PATH") or os.environ.get("PATH")
        found = (cwd / program).is_file() if "/" in program else shutil.which(program, path=path)
        if not found:
            return (f"spec.command: program {program!r} not found (in {cwd} or on PATH); "
                    "give an absolute path or install it")
        return None

    def command(self, spec: JobSpec) -> tuple[str, ...]:
        return as_this_python(spec)

    def begin(self, job_id: str, attempt: int, workers: Sequence[str], servers: Sequence[str]) -> Attempt:
        job_dir = self.job_dir(job_id)
        job_dir.mkdir(parents=True, exist_ok=True)
        job_dir.chmod(0o700)  # its logs, checkpoints and exit codes are the owner's only
        report_file = job_dir / "reports" / f"attempt-{attempt}.jsonl"
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.touch()  # marks the attempt as used even if the task never reports
        write_manifest(job_dir, attempt, [f"ps-{i}" for i in range(len(servers))]
                       + [f"worker-{i}" for i in range(len(workers))])
        env = {**self._base_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "TM_CHECKPOINT_DIR": str(job_dir / "checkpoint")}
        if servers:
            env["TM_PS_ADDRS"] = ",".join(f"127.0.0.1:{free_port()}" for _ in servers)
        return Attempt(env=env, chief_env={"TM_REPORT_FILE": str(report_file)}, progress=LineTail(report_file))

    def start(self, task: TaskLaunch) -> RunningTask:
        cwd = self.base_dir / task.workdir if task.workdir else self.base_dir
        return launch(task, cwd=cwd, job_dir=self.job_dir(task.job_id), spare=self._take_spare(task.command))

    def confirm(self, tasks: Sequence[RunningTask]) -> None:
        """Nothing to wait for: `start` returns once the process runs."""

    def tick(self, live: Sequence[RunningTask], starting: bool) -> None:
        if self.prestart and not starting:  # not while a job starts: spares would slow its start
            self._refill_spares()
        if time.monotonic() >= self._next_rotation:
            self._next_rotation = time.monotonic() + 1.0
            for task in live:
                if isinstance(task, Task):
                    rotate_log(task.log_path, self.log_max_bytes)

    def last_attempt(self, job_id: str) -> int:
        numbers = [int(p.stem.split("-")[1]) for p in (self.job_dir(job_id) / "reports").glob("attempt-*.jsonl")
                   if p.stem.split("-")[1].isdigit()]
        return max(numbers, default=0)

    def recover(self) -> Mapping[str, Recovered]:
        killed = kill_orphans(self.run_dir)
        if killed:
            log.info("recovery: killed %d task(s) a previous daemon left running: %s", len(killed), ", ".join(killed))
        return judge_attempts(self.run_dir)

    def close(self) -> None:
        self.prestart = 0
        for spare in self._spares:
            kill_group(spare.pid, signal.SIGKILL)
            spare.wait()
        self._spares.clear()

    # -- internals -------------------------------------------------------------
    def _cwd(self, spec: JobSpec) -> Path:
        return self.base_dir / spec.workdir if spec.workdir else self.base_dir

    def _base_env(self) -> dict[str, str]:
        """This process's environment without the daemon's secrets, plus the engine's extra variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIX) and k not in self.secret_env}
        env.update(self.extra_env)
        return env

    def _refill_spares(self) -> None:
        self._spares = [p for p in self._spares if p.poll() is None]
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


class LocalEngine(GangEngine):
    """Runs jobs as processes on this machine (see the module docstring and `engines/gang.py`)."""

    def __init__(self, cluster: Cluster | None = None, *, run_dir: Path, clock: Clock | None = None,
                 base_dir: Path | None = None, grace: float = 20.0, poll_interval: float = 0.05,
                 env: Mapping[str, str] | None = None, prestart: int = 0,
                 silent_running_after: float = 30.0, log_max_bytes: int = LOG_MAX_BYTES,
                 secret_env: Iterable[str] = (), ledger_journal: Path | None = None,
                 target_grace: float = 5.0, market: Market | None = None,
                 replace_delay: float | None = None) -> None:
        self.local = SubprocessRunner(run_dir, base_dir=base_dir, env=env, prestart=prestart,
                                      log_max_bytes=log_max_bytes, secret_env=secret_env)
        self.run_dir = self.local.run_dir
        self.base_dir = self.local.base_dir
        super().__init__(cluster or local_cluster(), self.local, clock=clock, grace=grace,
                         poll_interval=poll_interval, silent_running_after=silent_running_after,
                         ledger_journal=ledger_journal, machine=machine_cores(), target_grace=target_grace,
                         market=market, replace_delay=replace_delay)

    def job_dir(self, job_id: str) -> Path:
        return self.local.job_dir(job_id)

    def cleanup_orphans(self) -> list[str]:
        """Kill task processes a previous engine on this run_dir left running; `job/role-index` of each."""
        return kill_orphans(self.run_dir)

    def log_tasks(self, job_id: str) -> list[str]:
        return LocalFiles(self.job_dir(job_id)).tasks()

    def logs(self, job_id: str, task: str | None = None, *, follow: bool = False, tail: int | None = None,
             done: Callable[[], bool] | None = None, poll: float = 0.25) -> Iterator[str]:
        """The job folder's logs on this machine (see `Engine.logs`)."""
        return stream_logs(LocalFiles(self.job_dir(job_id)), task, tail=tail, follow=follow,
                           done=done or (lambda: not self.tasks(job_id)), poll=poll)
