"""kill -9 the daemon mid-run, start it again: every accepted job completes, resumed from its checkpoint, once.

Real everything: `trainmaster server` processes, SQLite, training processes that use `trainmaster.train`.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx

from server_harness import ServerProcess, job_yaml
from trainmaster.engines.local.tasks import alive, find_orphans

STEPS = 40
SCRIPT = """
import os, sys, time
import trainmaster.train as tm

session = tm.init()
session.restore()
log = os.path.join(os.path.dirname(os.environ["TM_CHECKPOINT_DIR"]), "steps.log")
with open(log, "a") as out:
    for step in session.steps(int(sys.argv[1]), state=lambda: {"w": 1}):
        out.write(f"{time.time()} {os.getpid()} {step}\\n")
        out.flush()
        time.sleep(0.1)
        session.report(step + 1, loss=1.0 / (step + 1))
"""


def trainer(name: str, script: Path) -> str:
    return (f"apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {{name: {name}}}\nspec:\n"
            f"  command: [python, {script}, '{STEPS}']\n  roles: {{worker: {{min: 1, resources: {{cpu: 1}}}}}}\n"
            f"  checkpoint: {{every: 0.5s}}\n")


def wait_for(client: httpx.Client, cond: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check(client.get("/v1/jobs").json()):  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {cond}"
        time.sleep(0.2)


def test_kill_9_mid_run_then_every_job_completes_once(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    server = ServerProcess(tmp_path / "data").start()
    try:
        http = httpx.Client(base_url=server.url, timeout=30)
        trainers = [http.post("/v1/jobs", content=trainer(f"t{i}", script)).json()["id"] for i in range(3)]
        # A whole-cluster gang: pending behind the trainers under fifo when the daemon dies.
        gang = http.post("/v1/jobs", content=job_yaml("gang", "echo gang done", cpu=2, workers=2)).json()["id"]

        def training(rows: list[dict[str, object]]) -> bool:
            steps = {r["id"]: r["step"] for r in rows}
            return all(int(steps[t]) >= 8 for t in trainers)  # type: ignore[call-overload]

        wait_for(http, "the trainers to pass step 8 (with checkpoints)", training, 90)
        late = http.post("/v1/jobs", content=job_yaml("late", "echo late done")).json()["id"]  # accepted: 201
        orphans = find_orphans(server.data_dir / "runs")
        assert len(orphans) == 3  # one live task per trainer, left behind by the daemon
        server.kill9()
        assert all(alive(pid, started) for _, pid, started in orphans)  # the tasks outlive the daemon

        server.start()
        restarted_at = time.time()
        assert not any(alive(pid, started) for _, pid, started in orphans)  # cleanup_orphans ran first
        everyone = [*trainers, gang, late]

        def finished(rows: list[dict[str, object]]) -> bool:
            states = {r["id"]: r["state"] for r in rows}
            return all(states.get(j) in ("succeeded", "failed", "cancelled", "rejected") for j in everyone)

        wait_for(http, "every job to end after the restart", finished, 120)
        rows = {r["id"]: r for r in http.get("/v1/jobs").json()}
        assert sorted(rows) == sorted(everyone)  # none lost, none duplicated
        assert {j: rows[j]["state"] for j in everyone} == dict.fromkeys(everyone, "succeeded")
        for jid in trainers:
            assert rows[jid]["restarts"] >= 1 and rows[jid]["step"] == STEPS
            text = (server.data_dir / "runs" / jid / "steps.log").read_text()
            runs: dict[str, list[tuple[float, int]]] = {}  # pid -> (time, step) of each step it ran
            for t, pid, step in (line.split() for line in text.splitlines()):
                runs.setdefault(pid, []).append((float(t), int(step)))
            spans = list(runs.values())
            assert len(spans) >= 2, text  # the first run, then at least one after the restart
            for earlier, later in itertools.pairwise(spans):
                assert earlier[-1][0] < later[0][0], text  # runs never overlap: nothing ran twice
            resumed = next(s for s in spans if s[0][0] > restarted_at)
            assert spans[0][-1][0] < restarted_at  # the daemon's orphan was gone before the new run
            assert resumed[0][1] > 0, text  # resumed from a checkpoint, not from zero
            assert spans[-1][-1][1] == STEPS - 1
        log = http.get(f"/v1/jobs/{late}/logs").text
        assert "late done" in log
        whats = [e["what"] for e in http.get(f"/v1/jobs/{trainers[0]}/metrics").json()["allocations"]]
        assert "recovered" in whats and whats[-1] == "succeeded"
    finally:
        server.stop()
