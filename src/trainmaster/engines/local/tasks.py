"""Task processes: launch in their own session, pin to cores, log to a file, leave a pid file.

The pid file (`run_dir/<job>/pids/<role>-<index>.pid`) holds the pid and the
kernel's start time of the process, so a restarted daemon can find the tasks
a killed predecessor left behind, and never mistakes a recycled pid for one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


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
    """One running replica of a role."""

    job_id: str
    role: str
    index: int
    node: str
    attempt: int
    cores: list[int]
    gpus: list[int]
    proc: subprocess.Popen[bytes]
    log_path: Path
    pid_path: Path
    started: str | None = None
    exit_code: int | None = None
    killed: bool = False  # SIGKILLed by the engine (revocation, broken gang)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def pid(self) -> int:
        return self.proc.pid

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
            if sig is signal.SIGKILL:
                self.killed = True
            kill_group(self.pid, sig)


def start_spare(python: str, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """A pre-started interpreter that imports torch now and waits for a task (see `warm.py`)."""
    return subprocess.Popen([python, "-m", "trainmaster.engines.local.warm"], cwd=cwd,
                            env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def launch(*, job_id: str, role: str, index: int, node: str, attempt: int, command: Sequence[str],
           cwd: Path, env: Mapping[str, str], cores: list[int], gpus: list[int], job_dir: Path,
           spare: subprocess.Popen[bytes] | None = None) -> Task:
    """Start one task process (or hand the command to a `spare`); output appends to `job_dir/<role>-<index>.log`."""
    log_path = job_dir / f"{role}-{index}.log"
    pid_dir = job_dir / "pids"
    pid_dir.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"=== trainmaster: attempt {attempt} on node {node}, cores {cores}, gpus {gpus}"
                  f"{' (pre-started)' if spare else ''} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        log.flush()
        if spare is not None and spare.stdin is not None:
            request = {"argv": list(command[1:]), "cwd": str(cwd), "env": dict(env), "log": str(log_path)}
            spare.stdin.write((json.dumps(request) + "\n").encode())
            spare.stdin.close()
            proc = spare
        else:
            proc = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    try:  # every thread: a pre-started interpreter may already have some
        threads = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
    except OSError:
        threads = [proc.pid]
    for tid in threads:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cores)
    pid_path = pid_dir / f"{role}-{index}.pid"
    started = start_time(proc.pid)
    tmp = pid_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "start": started, "job": job_id, "task": f"{role}-{index}",
                               "attempt": attempt}))
    os.replace(tmp, pid_path)
    return Task(job_id=job_id, role=role, index=index, node=node, attempt=attempt, cores=cores, gpus=gpus,
                proc=proc, log_path=log_path, pid_path=pid_path, started=started)


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
