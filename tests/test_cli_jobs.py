"""The real CLI against the real `trainmaster server` (both as processes): output, --json and exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_harness import ServerProcess, cli, free_port, job_yaml


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("cli-server")).start()
    yield proc
    proc.stop()


@pytest.fixture
def jobfile(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("echoer", "echo line one; echo line two; sleep 0.3"))
    return path


def wait_state(server: ServerProcess, jid: str, state: str, timeout: float = 60) -> None:
    """Poll over HTTP (waiting is not what these tests check; the CLI is slow to start on a busy box)."""
    deadline = time.monotonic() + timeout
    while httpx.get(f"{server.url}/v1/jobs/{jid}").json()["state"] != state:
        assert time.monotonic() < deadline, f"{jid} never became {state}"
        time.sleep(0.2)


def run(server: ServerProcess, *args: str) -> tuple[int, str, str]:
    done = cli(*args, "--url", server.url)
    return done.returncode, done.stdout, done.stderr


def test_submit_with_overrides_then_status_logs_queue(server: ServerProcess, jobfile: Path) -> None:
    code, out, err = run(server, "submit", str(jobfile), "--set", "metadata.priority=7", "--set",
                         "spec.roles.worker.max=2")
    assert code == 0, err
    jid = out.strip()
    assert jid.startswith("echoer")
    wait_state(server, jid, "succeeded")
    code, out, err = run(server, "status", jid, "--json")
    assert code == 0, err
    row = json.loads(out)
    assert (row["state"], row["priority"]) == ("succeeded", 7)
    code, out, _ = run(server, "logs", jid)
    assert code == 0 and "line one" in out and "line two" in out
    code, out, _ = run(server, "logs", jid, "-f", "--task", "worker-0")  # the job has ended: prints all, returns
    assert code == 0 and out.splitlines()[-2:] == ["line one", "line two"]
    code, out, _ = run(server, "queue", "--all")
    assert code == 0 and jid in out and "succeeded" in out
    code, out, _ = run(server, "queue", "--all", "--json")
    assert jid in [r["id"] for r in json.loads(out)]
    code, out, _ = run(server, "status", jid)
    assert code == 0 and "succeeded" in out and "priority" in out


def test_cancel_why_nodes_queues(server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(job_yaml("long", "sleep 60", cpu=2))
    code, out, err = run(server, "submit", str(path), "--json")
    assert code == 0, err
    jid = json.loads(out)["id"]
    code, out, _ = run(server, "why", jid)
    assert code == 0 and jid in out
    code, out, _ = run(server, "nodes")
    assert code == 0 and "n-0" in out and "n-1" in out
    code, out, _ = run(server, "queues", "--json")
    assert code == 0 and json.loads(out)[0]["name"] == "default"
    code, out, _ = run(server, "cancel", jid)
    assert code == 0 and "cancel requested" in out
    wait_state(server, jid, "cancelled")
    code, _, err = run(server, "cancel", jid)
    assert code == 2 and "already cancelled" in err


BAD = {
    "bad yaml": ("apiVersion: [oops\n", "malformed YAML at line"),
    "unknown field": (job_yaml("x", "true", extra="  colour: blue\n"), "spec.colour: unknown field"),
    "unknown queue": (job_yaml("x", "true", meta=", queue: nowhere"), "unknown queue 'nowhere'"),
    "impossible resources": (job_yaml("x", "true", cpu=64), "impossible resources"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line(server: ServerProcess, tmp_path: Path, case: str) -> None:
    text, message = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = run(server, "submit", str(path))
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_exit_codes_for_scripts(server: ServerProcess, tmp_path: Path) -> None:
    code, _, err = run(server, "status", "no-such-job")
    assert code == 3 and "no job 'no-such-job'" in err
    code, _, err = run(server, "submit", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err
    code, _, err = run(server, "submit", str(tmp_path / "x.yaml"), "--set", "novalue")
    assert code == 2
    dead = cli("queue", "--url", f"http://127.0.0.1:{free_port()}")
    assert dead.returncode == 4 and "cannot reach the trainmaster server" in dead.stderr


def test_server_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    done = cli("server", "--host", "0.0.0.0", "--data-dir", str(tmp_path), "--port", str(free_port()),
               env={"TRAINMASTER_TOKEN": ""})
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in done.stderr


@pytest.mark.parametrize(("option", "value"), [("--notice", "5"), ("--replace-delay", "2")])
def test_server_refuses_market_timing_options_without_a_market(tmp_path: Path, option: str, value: str) -> None:
    done = cli("server", "--data-dir", str(tmp_path), "--port", str(free_port()), option, value)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"trainmaster: error: {option}: needs --market (pass --market "
                                                f"lifetime.csv or a trace, or drop {option})"], done.stderr


def test_one_server_per_data_directory(server: ServerProcess) -> None:
    done = cli("server", "--data-dir", str(server.data_dir), "--port", str(free_port()))
    assert done.returncode == 2
    assert "another trainmaster server is using" in done.stderr
