"""Task processes: launch in their own session, pin to cores, log to a file, leave a pid file and an exit code.

The pid file (`run_dir/<job>/pids/<role>-<index>.pid`) holds the pid and the
kernel's start time of the process, so a restarted daemon can find the tasks
a killed predecessor left behind, and never mistakes a recycled pid for one.

A task runs under a small `sh` wrapper that writes the command's exit code to
`run_dir/<job>/exits/attempt-<n>/<role>-<index>` when it ends (a pre-started
interpreter writes it itself), so a daemon that was down when a task ended
judges it by what it left, never by relaunching it. A task killed with SIGKILL
leaves no code: it did not finish.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmaster.engines.gang import TaskLaunch

# `sh -c WRAPPER EXIT_FILE PID_FILE COMMAND...`. The shell first waits (5 s at most) for the engine to write
# its pid file, so no task ever runs that a restarted daemon could not find (a daemon killed between the
# fork and the pid file would otherwise leave one behind, untracked). It then runs the command and records
# its exit code atomically. The trap keeps the shell alive through the SIGTERM sent to the task's process
# group (the command checkpoints and exits); a trap with a handler is reset to the default in the command,
# unlike an ignored signal.
WRAPPER = ('n=0; while [ ! -e "$1" ]; do n=$((n+1)); [ "$n" -gt 500 ] && exit 70; sleep 0.01; done; shift; '
           'trap : TERM INT HUP; "$@"; code=$?; '
           'printf "%s\\n" "$code" > "$0.tmp" && mv -f "$0.tmp" "$0"; exit "$code"')
LOG_MODE = 0o600
TASKSET = shutil.which("taskset")  # pins the wrapper before it forks the command (util-linux)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if gone or zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return fields[19]


def alive(pid: int, started: str | None) -> bool:
    """Whether `pid` is running and is the same process that was started at `started`."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def kill_group(pid: int, sig: signal.Signals) -> None:
    """Signal the task's whole process group (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class Task:
    """One running replica of a role: a process in its own session (a `RunningTask` of the gang engine)."""

    launch: TaskLaunch
    proc: subprocess.Popen[bytes]
    log_path: Path
    pid_path: Path
    started: str | None = None
    exit_code: int | None = None

    @property
    def name(self) -> str:
        return self.launch.name

    @property
    def node(self) -> str:
        return self.launch.node

    @property
    def attempt(self) -> int:
        return self.launch.attempt

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def where(self) -> str:
        return str(self.log_path)

    def poll(self) -> int | None:
        """Exit code once the process has ended (reaping it and removing its pid file)."""
        if self.exit_code is None:
            code = self.proc.poll()
            if code is not None:
                self.exit_code = code
                self.pid_path.unlink(missing_ok=True)
        return self.exit_code

    def signal(self, sig: signal.Signals) -> None:
        if self.poll() is None:
            kill_group(self.pid, sig)

    def reap(self) -> None:
        self.proc.wait()
        self.poll()


def start_spare(python: str, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """A pre-started interpreter that imports torch now and waits for a task (see `warm.py`)."""
    return subprocess.Popen([python, "-m", "trainmaster.engines.local.warm"], cwd=cwd,
                            env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def exit_file(job_dir: Path, attempt: int, name: str) -> Path:
    """Where the task `name` of `attempt` leaves its exit code."""
    return job_dir / "exits" / f"attempt-{attempt}" / name


def read_exit(path: Path) -> int | None:
    """The exit code a task left, None if it left none (still running, or killed)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def open_log(path: Path) -> int:
    """The task's log for appending, readable by the owner only (a job's output can hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_MODE)
    os.fchmod(fd, LOG_MODE)
    return fd


def launch(task: TaskLaunch, *, cwd: Path, job_dir: Path, spare: subprocess.Popen[bytes] | None = None) -> Task:
    """Start one task process (or hand the command to a `spare`); output appends to `job_dir/<role>-<index>.log`.

    Raises OSError or ValueError when the process cannot be started (the engine reports that as the job's failure).
    """
    name = task.name
    log_path = job_dir / f"{name}.log"
    pid_dir = job_dir / "pids"
    pid_dir.mkdir(parents=True, exist_ok=True)
    pid_path = pid_dir / f"{name}.pid"
    pid_path.unlink(missing_ok=True)
    code_path = exit_file(job_dir, task.attempt, name)
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.unlink(missing_ok=True)
    cores = list(task.cores)
    log = open_log(log_path)
    try:
        os.write(log, f"=== trainmaster: attempt {task.attempt} on node {task.node}, cores {cores}, gpus "
                      f"{list(task.gpus)}{' (pre-started)' if spare else ''} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
                 .encode())
        if spare is not None and spare.stdin is not None:
            request = {"argv": list(task.command[1:]), "cwd": str(cwd), "env": dict(task.env), "log": str(log_path),
                       "exit_file": str(code_path), "pid_file": str(pid_path)}
            spare.stdin.write((json.dumps(request) + "\n").encode())
            spare.stdin.close()
            proc = spare
        else:
            pin = ["taskset", "-c", ",".join(map(str, cores))] if TASKSET and cores else []
            proc = subprocess.Popen([*pin, "/bin/sh", "-c", WRAPPER, str(code_path), str(pid_path), *task.command],
                                    cwd=cwd, env=dict(task.env), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        os.close(log)
    try:  # every thread: a pre-started interpreter may already have some
        threads = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
    except OSError:
        threads = [proc.pid]
    for tid in threads:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cores)
    started = start_time(proc.pid)
    tmp = pid_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "start": started, "job": task.job_id, "task": name,
                               "attempt": task.attempt}))
    os.replace(tmp, pid_path)
    return Task(launch=task, proc=proc, log_path=log_path, pid_path=pid_path, started=started)


def rotate_log(path: Path, limit: int) -> bool:
    """Keep a task's log under `limit` bytes in all: past half of it, the log moves to `<log>.1` (copy-truncate).

    The task keeps appending to the same open file (O_APPEND), so it writes at
    the new end after the truncate; lines written between the copy and the
    truncate are lost, as with logrotate's copytruncate.
    """
    try:
        if path.stat().st_size <= limit // 2:
            return False
        old = path.with_name(path.name + ".1")
        tmp = path.with_name(path.name + ".1.tmp")
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            os.fchmod(dst.fileno(), LOG_MODE)
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, old)
        os.truncate(path, 0)
    except OSError:
        return False
    return True


def find_orphans(run_dir: Path) -> list[tuple[Path, int, str | None]]:
    """Pid files under `run_dir` whose process is still the one that wrote them."""
    out = []
    for pid_path in sorted(run_dir.glob("*/pids/*.pid")):
        try:
            info = json.loads(pid_path.read_text())
            pid, started = int(info["pid"]), info.get("start")
        except (OSError, ValueError, KeyError, TypeError):
            pid_path.unlink(missing_ok=True)
            continue
        if alive(pid, started):
            out.append((pid_path, pid, started))
        else:
            pid_path.unlink(missing_ok=True)
    return out


def kill_orphans(run_dir: Path, wait: float = 10.0) -> list[str]:
    """SIGKILL every task a previous engine left running under `run_dir`; returns `job/role-index` of each."""
    orphans = find_orphans(run_dir)
    for _, pid, _ in orphans:
        kill_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while any(alive(pid, started) for _, pid, started in orphans) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = []
    for pid_path, _, _ in orphans:
        killed.append(f"{pid_path.parent.parent.name}/{pid_path.stem}")
        pid_path.unlink(missing_ok=True)
    return killed
