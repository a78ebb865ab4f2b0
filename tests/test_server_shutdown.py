"""A real `trainmaster server` stops on SIGTERM even while a client follows a running job's logs.

uvicorn waits for every open response before it exits; the follow stream's generator runs in a
worker thread that no cancellation reaches, and a job that prints nothing more never gives it a
line to yield. Without `serve.Server` telling the daemon (`Daemon.closing`), the stream, and so the
server, would last as long as the job.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from server_harness import ServerProcess, job_yaml

pytestmark = pytest.mark.slow  # a real server and a real task process


def test_sigterm_ends_an_open_follow_stream_and_the_server_exits(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "home").start()
    try:
        r = httpx.post(f"{server.url}/v1/jobs", content=job_yaml("quiet", "echo up; sleep 600"),
                       headers={"content-type": "application/yaml"}, timeout=30)
        assert r.status_code == 201, r.text
        lines: list[str] = []
        ended = threading.Event()
        first = threading.Event()

        def follow() -> None:  # a client that stays connected, as `trainmaster logs -f` in another terminal
            with httpx.stream("GET", f"{server.url}/v1/jobs/quiet/logs", params={"follow": "true"},
                              timeout=None) as response:
                for line in response.iter_lines():
                    lines.append(line)
                    if "up" in line:
                        first.set()
            ended.set()

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert first.wait(120), f"no line from the job: {lines}"
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = server.proc.wait(60)
        except Exception:
            server.proc.kill()
            raise AssertionError(f"the server did not stop on SIGTERM with a follow stream open: {server.log()}") \
                from None
        assert code == 0, server.log()
        assert ended.wait(30), "the follow stream did not end with the server"
    finally:
        server.stop()  # a no-op once it exited; the daemon's own stop ended the job's task
