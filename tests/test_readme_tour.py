"""Every line of the README's tour works as written: the real CLI, a real server, a real training job.

The lines are read from README.md itself, so the tour cannot drift from what works. Only the
environment differs from a user's shell: TRAINMASTER_URL (a free loopback port) and TRAINMASTER_HOME
(a temporary data directory), which the CLI and the server both read. The simulator's tour lines
replay ../shared/data and skip without it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server_harness import REPO, free_port

pytestmark = pytest.mark.slow
README = REPO / "README.md"


def tour_block(heading: str) -> list[str]:
    """The shell lines of the first ```sh block after `heading`, comments dropped, `;` split into lines."""
    text = README.read_text()
    start = text.index(heading)
    block = text[text.index("```sh\n", start) + 6:text.index("```", text.index("```sh\n", start) + 6)]
    lines: list[str] = []
    for raw in block.replace("\\\n", " ").splitlines():
        command = re.sub(r"\s+#.*$", "", raw).strip()
        lines.extend(part.strip() for part in command.split(";") if part.strip())
    return lines


def environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # the virtualenv's `trainmaster` entry point
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONFAULTHANDLER": "1",
            "TRAINMASTER_URL": f"http://127.0.0.1:{free_port()}", "TRAINMASTER_HOME": str(tmp_path / "home")}


def run(line: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{line!r} exited {result.returncode}: {result.stderr}{result.stdout}"
    return result


def state(env: dict[str, str], job: str) -> str:
    return str(httpx.get(f"{env['TRAINMASTER_URL']}/v1/jobs/{job}", timeout=10).json()["state"])


def wait_until(what: str, check: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_real_jobs_tour_works_line_by_line(tmp_path: Path) -> None:
    lines = tour_block("### Run real jobs")
    assert lines[0] == "trainmaster server &" and lines[-1].startswith("trainmaster cancel ")
    job = lines[-1].split()[-1]
    env = environment(tmp_path)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(["bash", "-c", lines[0].removesuffix("&").strip()], cwd=REPO, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failure: BaseException | None = None  # a step that failed: shown as the cause if the server then hangs too
    try:
        wait_until("the server", lambda: _healthy(env))
        for line in lines[1:]:
            if line.endswith(" -f"):  # following: read until the task has written, then Ctrl-C as a user would
                _follow_then_interrupt(line, env)
                continue
            out = run(line, env).stdout
            if line.startswith("trainmaster submit"):
                assert job in out
                wait_until("the job to run", lambda: state(env, job) == "running")
            elif line.split()[1] in ("queue", "status", "why"):
                assert job in out, out
            elif line.split()[1] in ("nodes", "queues"):
                assert "local" in out or "default" in out, out
            elif line.startswith("trainmaster cancel"):
                wait_until("the job to be cancelled", lambda: state(env, job) == "cancelled")
    except BaseException as exc:
        failure = exc
        raise
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # `kill %1`: how a backgrounded server is stopped
        try:
            server.wait(90)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack into the log
            time.sleep(2)
            os.killpg(server.pid, signal.SIGKILL)
            raise AssertionError(f"the server did not stop on SIGTERM: {(tmp_path / 'server.log').read_text()}") \
                from failure


def _healthy(env: dict[str, str]) -> bool:
    try:
        return bool(httpx.get(f"{env['TRAINMASTER_URL']}/v1/health", timeout=2).json().get("ok"))
    except httpx.TransportError:
        return False


def _follow_then_interrupt(line: str, env: dict[str, str]) -> None:
    # SIGINT back at its default for the CLI: a non-interactive shell starts background jobs with it ignored
    # (`make test &`), and Python then keeps ignoring it, so the Ctrl-C below would not reach `logs -f`.
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()  # blocks until the running task's log has a line (the engine's launch line)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the README says (the job runs on: it prints little itself)
    proc.wait(30)
    assert "=== trainmaster: attempt 1 on node " in first, first  # `[worker-0] === trainmaster: ...`
    assert proc.returncode in (0, 130), proc.returncode


def test_the_simulator_tour_works_line_by_line(tmp_path: Path, shared_data: Path) -> None:
    lines = tour_block("### Ask \"what if\": the simulator")
    assert lines and all(line.startswith("trainmaster ") for line in lines)
    env = environment(tmp_path)
    for line in lines:
        out = run(line, env, timeout=900).stdout
        assert "mean JCT" in out or "wait" in out.lower(), out[-2000:]
