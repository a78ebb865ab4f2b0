"""The Slurm-shaped commands through the real CLI against a real `trainmaster server` (both processes).

hold / release / update, dependencies (`submit --after`), arrays (`--array`),
`history`, `queue --watch`, tokens, and the server's own log lines. Jobs wait
on marker files the test creates, so nothing races on how fast the box is;
polling deadlines are only hang guards.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server_harness import ServerProcess, cli, job_yaml

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("slurm-server")).start()
    yield proc
    proc.stop()


def run(server: ServerProcess, *args: str) -> tuple[int, str, str]:
    done = cli(*args, "--url", server.url)
    return done.returncode, done.stdout, done.stderr


def get(server: ServerProcess, path: str) -> dict[str, object]:
    out: dict[str, object] = httpx.get(f"{server.url}{path}", timeout=10).json()
    return out


def wait_state(server: ServerProcess, jid: str, *states: str, timeout: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        row = get(server, f"/v1/jobs/{jid}")
        if row["state"] in states:
            return row
        assert time.monotonic() < deadline, f"{jid} is {row['state']}, never {states}"
        time.sleep(0.2)


def submit(server: ServerProcess, tmp_path: Path, name: str, command: str, *flags: str, **kw: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(job_yaml(name, command, **kw))  # type: ignore[arg-type]
    code, out, err = run(server, "submit", str(path), *flags)
    assert code == 0, err
    return out.strip()


def blocker(server: ServerProcess, tmp_path: Path, name: str) -> tuple[str, Path]:
    """A job holding the whole cluster (2 nodes x 2 CPUs) until the test creates its marker.

    Its chief reports step 0 at once (a line in TM_REPORT_FILE, as `trainmaster.train` writes), so the engine
    calls it running at that report instead of after `silent_running_after` (30 s) of a silent command.
    """
    marker, script = tmp_path / f"{name}.go", tmp_path / f"{name}.sh"
    script.write_text('[ -z "$TM_REPORT_FILE" ] || echo "{\\"t\\": $(date +%s), \\"step\\": 0}" >> "$TM_REPORT_FILE"\n'
                      f"while [ ! -f {marker} ]; do sleep 0.1; done\n")
    jid = submit(server, tmp_path, name, f"sh {script}", cpu=2, workers=2)
    wait_state(server, jid, "running")
    return jid, marker


def test_hold_keeps_a_job_pending_until_release_and_refuses_running_or_ended_jobs(
        server: ServerProcess, tmp_path: Path) -> None:
    big, go = blocker(server, tmp_path, "big")
    small = submit(server, tmp_path, "small", "echo ran")
    code, out, err = run(server, "hold", small)
    assert code == 0 and "held" in out, err
    code, _, err = run(server, "hold", big)
    assert code == 2 and "is running; only a pending job can be held" in err
    go.touch()
    wait_state(server, big, "succeeded")
    probe = submit(server, tmp_path, "probe", "echo probe")  # fifo: it starts only after `small` could have
    wait_state(server, probe, "succeeded")
    assert get(server, f"/v1/jobs/{small}")["state"] == "pending"
    code, out, _ = run(server, "why", small, "--json")
    why = json.loads(out)
    assert (why["category"], why["source"]) == ("held", "gate") and why["eta"] is None
    code, out, _ = run(server, "queue", "--json")
    assert next(r for r in json.loads(out) if r["id"] == small)["held"] is True
    code, out, err = run(server, "release", small)
    assert code == 0 and "released" in out, err
    wait_state(server, small, "succeeded")
    code, _, err = run(server, "release", small)
    assert code == 2 and "already succeeded" in err
    code, _, err = run(server, "hold", "no-such-job")
    assert code == 3


def test_dependencies_wait_for_success_and_a_failed_dependency_cancels_the_dependent(
        server: ServerProcess, tmp_path: Path) -> None:
    bad = submit(server, tmp_path, "bad", "exit 3", extra="  maxRestarts: 0\n")
    orphan = submit(server, tmp_path, "orphan", "echo never", "--after", bad)
    row = wait_state(server, orphan, "cancelled")
    assert f"dependency: {bad} failed" in str(row["message"]) and row["first_start"] is None
    first, go = blocker(server, tmp_path, "first")
    second = submit(server, tmp_path, "second", "echo second", "--after", first)
    third = submit(server, tmp_path, "third", "echo third", "--after", f"{second},{first}")
    code, out, _ = run(server, "why", third)
    assert code == 0 and "(dependency)" in out and f"waits for {second}, {first} to succeed" in out
    go.touch()
    rows = {jid: wait_state(server, jid, "succeeded") for jid in (first, second, third)}
    assert rows[second]["first_start"] >= rows[first]["finish_time"]  # type: ignore[operator]
    assert rows[third]["first_start"] >= rows[second]["finish_time"]  # type: ignore[operator]
    code, _, err = run(server, "submit", str(tmp_path / "second.yaml"), "--after", "ghost")
    assert code == 2 and "spec.after: no job 'ghost'" in err


def test_array_submits_one_job_per_index_with_its_index(server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(job_yaml("sweep", "echo index=$TM_ARRAY_INDEX"))
    code, out, err = run(server, "submit", str(path), "--array", "1-5:2", "--json")
    assert code == 0, err
    ids = [r["id"] for r in json.loads(out)]
    assert ids == ["sweep-1", "sweep-3", "sweep-5"]
    for jid in ids:
        wait_state(server, jid, "succeeded")
        code, out, _ = run(server, "logs", jid)
        assert f"index={jid.rsplit('-', 1)[1]}" in out
    code, _, err = run(server, "submit", str(path), "--array", "5-1")
    assert code == 2 and "--array" in err and "empty range" in err


def test_update_priority_and_max_validated_like_the_spec(server: ServerProcess, tmp_path: Path) -> None:
    wall, go = blocker(server, tmp_path, "wall")
    job = submit(server, tmp_path, "later", "echo later")
    code, out, err = run(server, "update", job, "--priority", "9", "--max", "2")
    assert code == 0 and "priority 9" in out, err
    code, _, err = run(server, "update", job, "--max", "0")
    assert code == 2 and "spec.roles.worker" in err and "Traceback" not in err
    code, _, err = run(server, "update", job)
    assert code == 2 and "nothing to change" in err
    go.touch()
    row = wait_state(server, job, "succeeded")
    assert row["priority"] == 9
    wait_state(server, wall, "succeeded")
    code, _, err = run(server, "update", job, "--priority", "1")
    assert code == 2 and "already succeeded" in err


def test_history_columns_filters_and_json(server: ServerProcess, tmp_path: Path) -> None:
    ok = submit(server, tmp_path, "acct-ok", "echo fine")
    failed = submit(server, tmp_path, "acct-bad", "exit 3", extra="  maxRestarts: 0\n")
    wait_state(server, ok, "succeeded")
    wait_state(server, failed, "failed")
    code, out, err = run(server, "history", "--json", "--since", "1h")
    assert code == 0, err
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows[ok]["exit_code"] == 0 and rows[failed]["exit_code"] == 3
    assert rows[ok]["elapsed"] >= 0 and rows[ok]["start"] >= rows[ok]["submit"]
    assert rows[ok]["gpu_hours"] == 0.0 and rows[ok]["cost"] is None  # a CPU-only cluster without prices
    code, out, _ = run(server, "history", "--state", "failed", "--format", "id,state,exit")
    lines = out.splitlines()
    assert lines[0].split() == ["JOB", "STATE", "EXIT"]
    assert any(line.split() == [failed, "failed", "3"] for line in lines[1:])
    assert all("succeeded" not in line for line in lines)
    code, out, _ = run(server, "history", "--until", "2000-01-01")
    assert code == 0 and out.strip() == "no jobs"
    code, _, err = run(server, "history", "--since", "yesterday-ish")
    assert code == 2 and "--since" in err and "not a time" in err


def test_queue_watch_redraws_and_piped_reasons_are_never_cut(server: ServerProcess, tmp_path: Path) -> None:
    wall, go = blocker(server, tmp_path, "tall")
    long_name = "a-dependency-with-a-rather-long-name-for-the-reason-column"
    dep = submit(server, tmp_path, long_name, "echo x")
    waiting = submit(server, tmp_path, "patient", "echo y", "--after", dep)
    code, out, _ = run(server, "queue", "--watch", "0.2", "--count", "2")
    assert code == 0 and out.count("--- ") == 2
    reason = f"dependency: waits for {dep} to succeed"
    assert len(reason) > 80
    assert sum(reason in line and line.split()[0] == waiting for line in out.splitlines()) == 2
    code, out, err = run(server, "cancel", waiting)  # a gated job never reached the scheduler: ends at once
    assert code == 0, err
    assert wait_state(server, waiting, "cancelled")["first_start"] is None
    go.touch()
    for jid in (wall, dep):
        wait_state(server, jid, "succeeded")


def test_server_log_has_one_line_per_request_and_decision_summaries(server: ServerProcess, tmp_path: Path) -> None:
    jid = submit(server, tmp_path, "logged", "echo hi")
    wait_state(server, jid, "succeeded")
    log = server.log()
    request = re.compile(r"level=info logger=trainmaster\.server event=request method=POST path=/v1/jobs "
                         r"status=201 ms=[\d.]+$", re.M)
    assert request.search(log), log[-2000:]
    decision = re.compile(r"event=decision cycle=\d+ .*changes=[1-9]\d* .*admit_ms=[\d.e-]+ .*place_ms=", re.M)
    assert decision.search(log), log[-2000:]
    assert re.search(r"event=recovered jobs=0 gated=0", log)


def test_token_from_flag_or_file_and_a_401_that_names_them(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "guarded", token="s3cret")
    try:
        proc.start()
        done = cli("queue", "--url", proc.url, env={"TRAINMASTER_TOKEN": ""})
        assert done.returncode == 2
        assert "TRAINMASTER_TOKEN" in done.stderr and "--token" in done.stderr and "--token-file" in done.stderr
        assert cli("queue", "--url", proc.url, "--token", "s3cret").returncode == 0
        assert cli("queue", "--url", proc.url, env={"TRAINMASTER_TOKEN": "s3cret"}).returncode == 0
        token_file = tmp_path / "token"
        token_file.write_text("s3cret\n")
        assert cli("queue", "--url", proc.url, "--token-file", str(token_file)).returncode == 0
    finally:
        proc.stop()


def test_hold_survives_a_daemon_restart(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "restart")
    try:
        proc.start()
        wall, go = blocker(proc, tmp_path, "wall")
        held = submit(proc, tmp_path, "held", "echo held")
        after = submit(proc, tmp_path, "after", "echo after", "--after", wall)
        assert run(proc, "hold", held)[0] == 0
        proc.kill9()
        proc.start()
        go.touch()
        wait_state(proc, after, "succeeded")  # submitted after `held`: under fifo it proves `held` could have run
        assert get(proc, f"/v1/jobs/{held}")["state"] == "pending"
        assert json.loads(run(proc, "why", held, "--json")[1])["category"] == "held"
        assert run(proc, "release", held)[0] == 0
        wait_state(proc, held, "succeeded")
    finally:
        proc.stop()
