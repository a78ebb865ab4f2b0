"""kill -9 the daemon, start it again: every accepted job ends exactly once, nothing runs twice.

Real everything: `trainmaster server` processes, SQLite, training processes
that use `trainmaster.train`. Deterministic: each trainer checkpoints and
then blocks at a barrier step until the test creates its `go` file, so the
daemon is always killed at a known point, never at one that depends on how
fast this machine trains.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_harness import ServerProcess, job_yaml
from trainmaster.engines.local.tasks import alive, find_orphans

pytestmark = pytest.mark.slow

STEPS, BARRIER = 12, 5
SCRIPT = f"""
import os, pathlib, sys, time
import trainmaster.train as tm

gates = pathlib.Path(sys.argv[1])
name = os.environ["TM_JOB_ID"]
session = tm.init()
session.restore()
log = os.path.join(os.path.dirname(os.environ["TM_CHECKPOINT_DIR"]), "steps.log")
with open(log, "a") as out:
    for step in session.steps({STEPS}, state=lambda: {{"w": 1}}):
        if step == {BARRIER} and not (gates / f"{{name}}.go").exists():
            session.save({{"w": 1}}, step)  # everything before the barrier is checkpointed
            (gates / f"{{name}}.at-barrier").touch()
            while not (gates / f"{{name}}.go").exists():
                time.sleep(0.05)
            if (gates / f"{{name}}.crash").exists() and not (gates / f"{{name}}.crashed").exists():
                (gates / f"{{name}}.crashed").touch()
                sys.exit(3)
        out.write(f"{{os.getpid()}} {{step}}\\n")
        out.flush()
        session.report(step + 1, loss=1.0 / (step + 1))
"""
ENDED = ("succeeded", "failed", "cancelled", "rejected")


def trainer(name: str, script: Path, gates: Path) -> str:
    return (f"apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {{name: {name}}}\nspec:\n"
            f"  command: [python, {script}, {gates}]\n  roles: {{worker: {{min: 1, resources: {{cpu: 1}}}}}}\n"
            f"  checkpoint: {{every: 1h}}\n")


def wait_for(what: str, check: Any, timeout: float = 120) -> None:
    """Poll until `check()` holds; the deadline only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def rows(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in http.get("/v1/jobs").json()}


def steps_run(server: ServerProcess, jid: str) -> list[tuple[str, int]]:
    """(pid, step) of every step the job's processes ran, in order."""
    text = (server.data_dir / "runs" / jid / "steps.log").read_text()
    return [(pid, int(step)) for pid, step in (line.split() for line in text.splitlines())]


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    gates = tmp_path / "gates"
    gates.mkdir()
    server = ServerProcess(tmp_path / "data")
    yield server, script, gates
    server.stop()


def test_kill_9_mid_run_then_every_job_completes_once_from_its_checkpoint(setup: Any) -> None:
    server, script, gates = setup
    server.start()
    http = httpx.Client(base_url=server.url, timeout=30)
    trainers = [http.post("/v1/jobs", content=trainer(f"t{i}", script, gates)).json()["id"] for i in range(3)]
    # A whole-cluster gang: pending behind the trainers under fifo when the daemon dies.
    gang = http.post("/v1/jobs", content=job_yaml("gang", "echo gang done", cpu=2, workers=2)).json()["id"]
    wait_for("every trainer at its barrier", lambda: all((gates / f"{t}.at-barrier").exists() for t in trainers))
    late = http.post("/v1/jobs", content=job_yaml("late", "echo late done")).json()["id"]  # accepted: 201
    orphans = find_orphans(server.data_dir / "runs")
    assert len(orphans) == 3  # one live task per trainer, each blocked at its barrier
    server.kill9()
    assert all(alive(pid, started) for _, pid, started in orphans)  # the tasks outlive the daemon

    server.start()
    assert not any(alive(pid, started) for _, pid, started in orphans)  # recovery killed them first
    for t in trainers:
        (gates / f"{t}.go").touch()
    everyone = [*trainers, gang, late]
    wait_for("every job to end after the restart", lambda: all(
        rows(http).get(j, {}).get("state") in ENDED for j in everyone))
    final = rows(http)
    assert sorted(final) == sorted(everyone)  # none lost, none duplicated
    assert {j: final[j]["state"] for j in everyone} == dict.fromkeys(everyone, "succeeded")
    for jid in trainers:
        ran = steps_run(server, jid)
        assert sorted(step for _, step in ran) == list(range(STEPS)), ran  # every step exactly once
        pids = list(dict.fromkeys(pid for pid, _ in ran))
        assert len(pids) == 2  # the first run up to the barrier, the resumed one after it
        assert next(s for p, s in ran if p == pids[1]) == BARRIER  # resumed at the checkpoint, not from zero
        assert final[jid]["restarts"] == 1 and final[jid]["step"] == STEPS
    assert "late done" in http.get(f"/v1/jobs/{late}/logs").text
    whats = [e["what"] for e in http.get(f"/v1/jobs/{trainers[0]}/metrics").json()["allocations"]]
    assert "recovered" in whats and whats[-1] == "succeeded"


def test_a_job_that_finishes_while_the_daemon_is_down_never_runs_again(setup: Any) -> None:
    server, script, gates = setup
    server.start()
    http = httpx.Client(base_url=server.url, timeout=30)
    done = http.post("/v1/jobs", content=trainer("done", script, gates)).json()["id"]
    crash = http.post("/v1/jobs", content=trainer("crash", script, gates)).json()["id"]
    (gates / f"{crash}.crash").touch()
    wait_for("both trainers at their barriers", lambda: all(
        (gates / f"{j}.at-barrier").exists() for j in (done, crash)))
    orphans = find_orphans(server.data_dir / "runs")
    server.kill9()
    for jid in (done, crash):
        (gates / f"{jid}.go").touch()  # while no daemon watches: one finishes, one exits 3
    wait_for("both tasks to exit", lambda: not any(alive(pid, started) for _, pid, started in orphans))

    server.start()
    wait_for("both jobs to end", lambda: all(rows(http)[j]["state"] in ENDED for j in (done, crash)))
    final = rows(http)
    assert final[done]["state"] == "succeeded" and final[done]["restarts"] == 0
    assert "finished while the daemon was down" in final[done]["message"] and final[done]["step"] == STEPS
    assert len({pid for pid, _ in steps_run(server, done)}) == 1  # one process ran it, once
    assert not (server.data_dir / "runs" / done / "reports" / "attempt-2.jsonl").exists()  # never relaunched
    assert final[crash]["state"] == "succeeded" and final[crash]["restarts"] == 1  # the crash counted as a failure
    decisions = [d["text"] for d in http.get(f"/v1/jobs/{crash}/why").json()["decisions"]]
    assert any("a task failed while it was down" in d and "exited with code 3" in d for d in decisions)
    assert sorted(step for _, step in steps_run(server, crash)) == list(range(STEPS))
