"""The real daemon, as users start it: its files are private, and where it was started does not matter.

Each test runs `trainmaster server` as a process (tests/server_harness.py) and the real CLI.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

import httpx
import pytest

from server_harness import REPO, ServerProcess, cli, job_yaml

TOKEN = "file-token-123"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def wait_ended(url: str, jid: str, headers: dict[str, str] | None = None, timeout: float = 120) -> dict[str, object]:
    """Poll with a generous deadline: a hang guard, not a timing check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row: dict[str, object] = httpx.get(f"{url}/v1/jobs/{jid}", headers=headers).json()
        if row["state"] in ("succeeded", "failed", "cancelled", "rejected"):
            return row
        time.sleep(0.1)
    raise AssertionError(f"{jid} did not end: {row}")


def test_data_dir_store_and_logs_are_private_and_a_loose_token_file_is_warned_about(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # as an older build (or a user) left it
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    server = ServerProcess(data, extra_args=("--token-file", str(token_file))).start_with(
        headers={"Authorization": f"Bearer {TOKEN}"})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        r = httpx.post(f"{server.url}/v1/jobs", content=job_yaml("secretive", "echo hi"), headers=auth)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        assert wait_ended(server.url, jid, auth)["state"] == "succeeded"
        assert mode(data) == 0o700 and mode(data / "runs") == 0o700 and mode(data / "runs" / jid) == 0o700
        for db in data.glob("trainmaster.db*"):  # the store and SQLite's -wal / -shm files
            assert mode(db) == 0o600, db
        assert mode(data / "runs" / jid / "worker-0.log") == 0o600
        warnings = [line for line in server.log().splitlines() if "readable by others" in line]
        assert len(warnings) == 1 and "chmod 600" in warnings[0] and TOKEN not in server.log()
    finally:
        server.stop()
    token_file.chmod(0o600)  # tightened: no warning on the next start
    server = ServerProcess(data, extra_args=("--token-file", str(token_file))).start_with(headers=auth)
    server.stop()
    assert sum("readable by others" in line for line in server.log().splitlines()) == 1


@pytest.mark.slow
def test_a_daemon_started_elsewhere_runs_jobs_relative_to_their_yaml(tmp_path: Path) -> None:
    """Defect 7: started in an unrelated folder, the daemon still finds every job's script (the CLI resolved the
    workdir against the YAML's folder); a raw document with a relative workdir is refused naming the field."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import os\nprint('ran in', os.getcwd())\nprint('done')\n")
    (project / "job.yaml").write_text(job_yaml("mine", "x").replace("[sh, -c, 'x']", "[python, train.py]"))
    server = ServerProcess(tmp_path / "data", cwd=elsewhere).start()
    try:
        done = cli("submit", str(project / "job.yaml"), "--url", server.url)
        assert done.returncode == 0, done.stderr
        jid = done.stdout.strip()
        assert wait_ended(server.url, jid)["state"] == "succeeded"
        done = cli("logs", jid, "--tail", "1", "--url", server.url)
        assert (done.returncode, done.stdout) == (0, "[worker-0] done\n"), done.stderr
        done = cli("logs", jid, "--tail", "2", "-f", "--task", "worker-0", "--url", server.url)
        assert done.stdout == f"ran in {project.resolve()}\ndone\n", done.stderr
        done = cli("logs", jid, "--tail", "many", "--url", server.url)
        assert done.returncode == 2 and "'many' is not a line count" in done.stderr
        # The shipped example, from the daemon's unrelated folder (real torch: the slow part of this test).
        done = cli("submit", "examples/digits/job.yaml", "--set", "spec.target.steps=20", "--set",
                   "spec.roles.worker.max=1", "--url", server.url)
        assert done.returncode == 0, done.stderr
        example = done.stdout.strip()
        # Sent as is (curl --data-binary), a relative workdir is the server's folder's business: refused at once.
        raw = (project / "job.yaml").read_text() + "  workdir: project\n"
        r = httpx.post(f"{server.url}/v1/jobs", content=raw)
        assert r.status_code == 422 and r.json()["field"] == "spec.workdir", r.text
        assert f"relative to the server's folder {elsewhere.resolve()}" in r.json()["error"]
        assert wait_ended(server.url, example, timeout=300)["state"] == "succeeded"
    finally:
        server.stop()
    assert (REPO / "examples/digits/job.yaml").is_file()
