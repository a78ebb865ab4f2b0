"""Run the real `trainmaster server` (and the real CLI) as processes, for the server, CLI and durability tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
# Two virtual nodes of 2 CPUs each on this machine (the cores are shared: oversubscribed on a 2-core box).
CLUSTER_YAML = "nodes:\n  - {name: n, count: 2, cpu: 2, memory: 4Gi}\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def job_yaml(name: str, command: str, *, cpu: int = 1, workers: int = 1, extra: str = "", meta: str = "") -> str:
    return (f"apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {{name: {name}{meta}}}\n"
            f"spec:\n  command: [sh, -c, {command!r}]\n"
            f"  roles: {{worker: {{min: {workers}, resources: {{cpu: {cpu}}}}}}}\n{extra}")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "trainmaster.cli.main", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _absolute_pythonpath() -> dict[str, str]:
    """This environment with PYTHONPATH made absolute, so a server started in another folder imports this code."""
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    return env


class ServerProcess:
    """`trainmaster server` on a free loopback port with a data directory that outlives it."""

    def __init__(self, data_dir: Path, policy: str = "fifo", cluster_yaml: str | None = CLUSTER_YAML,
                 extra_args: tuple[str, ...] = (), token: str | None = None, *, cwd: Path = REPO) -> None:
        self.data_dir = data_dir
        self.policy = policy
        self.extra_args = extra_args  # more `trainmaster server` flags
        self.cwd = cwd  # the daemon's working folder
        self.token = token  # given to the server as TRAINMASTER_TOKEN; then every request needs it
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = data_dir / "cluster.yaml"
        if cluster_yaml is not None:  # None: the engine finds its nodes (the ray engine)
            self.cluster.write_text(cluster_yaml)

    def start(self, timeout: float = 60) -> ServerProcess:
        return self.start_with(timeout=timeout)

    def start_with(self, timeout: float = 60, headers: dict[str, str] | None = None) -> ServerProcess:
        """Start and wait for health (sending `headers`, e.g. the token, when the server needs them)."""
        log = (self.data_dir / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainmaster.cli.main", "server", "--data-dir", str(self.data_dir),
             "--port", str(self.port), *(["--cluster", str(self.cluster)] if self.cluster.exists() else []),
             "--policy", self.policy, *self.extra_args],
            cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**_absolute_pythonpath(), "TRAINMASTER_TOKEN": self.token or ""})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/v1/health", timeout=2, headers=headers or self.headers).json().get("ok"):
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"server did not come up: {self.log()[-2000:]}")

    def log(self) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the daemon alone: its task processes (own sessions) stay behind as orphans."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
