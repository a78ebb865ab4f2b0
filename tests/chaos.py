"""The chaos driver: a real daemon running ~10 real jobs while a seeded driver kills it, its tasks, and a job.

Used by tests/test_chaos.py (one seed) and bench/chaos.py (several seeds, figures for BENCHMARKS.md).
Everything is real: `trainmaster server` processes, SQLite, torch training processes (tests/jobs/
chaos_trainer.py and the parameter-server example). The driver is sequential: it never submits or
cancels while the daemon is down, so every 201 it got is a job that must end exactly once.

What `check` proves afterwards, from what the processes left behind:
- every accepted job ended exactly once (one terminal event in its history), failed and cancelled
  ones with a reason, none lost;
- no step ran twice past its checkpoint: every run of a trainer starts at or after the last checkpoint
  logged before it, no two runs of a job overlap in time, and a succeeded trainer finished once;
- no process of any job outlives it;
- the engine's device ledger (journal) never booked a GPU twice or a node's CPU or memory past its
  capacity, and after every daemon start nothing was booked before the dead daemon's tasks were gone.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from server_harness import REPO, ServerProcess, job_yaml
from trainmaster.engines.local.tasks import alive, find_orphans

TRAINER = Path(__file__).resolve().parent / "jobs" / "chaos_trainer.py"
CLUSTER = "nodes:\n  - {name: n, count: 2, cpu: 2, memory: 6Gi, gpu: 2}\n"
ENDED = frozenset({"succeeded", "failed", "cancelled", "rejected"})


def trainer(name: str, *, steps: int, lo: int = 1, hi: int = 1, cpu: str = "1", gpu: int = 1,
            priority: int = 0, every: int = 10) -> str:
    return (f"apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {{name: {name}, priority: {priority}}}\n"
            f"spec:\n  command: [python, {TRAINER}, '{steps}', '0.05', '{every}']\n"
            f"  roles: {{worker: {{min: {lo}, max: {hi}, resources: {{cpu: {cpu}, gpu: {gpu}, memory: 512Mi}}}}}}\n"
            f"  maxRestarts: 20\n")


PS_JOB = (f"apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {{name: ps}}\nspec:\n"
          f"  command: [python, {REPO / 'examples/ps/train.py'}, --steps, '150']\n"
          f"  architecture: parameter-server\n  maxRestarts: 20\n  checkpoint: {{every: 1s}}\n"
          f"  roles:\n    worker: {{min: 2, max: 2, resources: {{cpu: 500m, memory: 512Mi}}}}\n"
          f"    ps: {{min: 1, max: 1, resources: {{cpu: 500m, memory: 256Mi}}}}\n")

# The first eight arrive at once; the two priority jobs arrive while the driver disturbs.
INITIAL = {
    "elastic-a": trainer("elastic-a", steps=60, hi=2, cpu="500m"),
    "elastic-b": trainer("elastic-b", steps=60, hi=2, cpu="500m"),
    "fixed-a": trainer("fixed-a", steps=50),
    "fixed-b": trainer("fixed-b", steps=50),
    "ps": PS_JOB,
    "victim": trainer("victim", steps=2000),  # cancelled by the driver
    "broken": job_yaml("broken", "echo about to fail; exit 1", extra="  maxRestarts: 1\n"),
    "plain": job_yaml("plain", "sleep 1; echo plain done"),
}
LATE = {
    "urgent": trainer("urgent", steps=40, priority=10),
    "urgent-elastic": trainer("urgent-elastic", steps=40, hi=2, cpu="500m", priority=5),
}


@dataclass
class ChaosResult:
    seed: int
    submitted: int = 0
    ended_once: int = 0
    lost: int = 0
    ran_twice: int = 0
    daemon_kills: int = 0
    task_kills: int = 0
    cancelled: int = 0
    states: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def _task_processes(run_dir: Path) -> list[int]:
    """Pids of the training processes (the wrappers' children) of every live task."""
    out = []
    for _, pid, _ in find_orphans(run_dir):
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            out.extend(int(c) for c in children) if children else out.append(pid)
    return out


def _leftovers(run_dir: Path) -> list[str]:
    """Processes anywhere on this machine whose environment says they are a task of this run."""
    marker = f"TM_CHECKPOINT_DIR={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes():
                    found.append(f"pid {entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
    return found


def run_chaos(seed: int, workdir: Path, *, daemon_kills: int = 3, task_kills: int = 5,
              deadline_s: float = 420.0) -> ChaosResult:
    rng = random.Random(seed)
    result = ChaosResult(seed)
    started = time.monotonic()
    journal = workdir / "ledger.jsonl"
    server = ServerProcess(workdir / "data", policy="trainmaster", cluster_yaml=CLUSTER,
                           extra_args=("--ledger-journal", str(journal)))
    server.start()
    http = httpx.Client(base_url=server.url, timeout=30)
    accepted: list[str] = []
    try:
        for doc in INITIAL.values():
            accepted.append(http.post("/v1/jobs", content=doc).json()["id"])
        plan = (["kill-daemon"] * daemon_kills + ["kill-task"] * task_kills + ["cancel"]
                + [f"submit:{name}" for name in LATE])
        rng.shuffle(plan)
        for step in plan:
            time.sleep(rng.uniform(0.5, 2.5))
            if step == "kill-daemon":
                server.kill9()
                time.sleep(rng.uniform(0.0, 1.0))  # its tasks run on unwatched meanwhile
                server.start()
                result.daemon_kills += 1
            elif step == "kill-task":
                pids = _task_processes(server.data_dir / "runs")
                if pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(rng.choice(pids), signal.SIGKILL)
                        result.task_kills += 1
            elif step == "cancel":
                http.post("/v1/jobs/victim/cancel")
                result.cancelled += 1
            else:
                accepted.append(http.post("/v1/jobs", content=LATE[step.split(":")[1]]).json()["id"])
        result.submitted = len(accepted)
        end = started + deadline_s
        while time.monotonic() < end:
            rows = {r["id"]: r for r in http.get("/v1/jobs").json()}
            if all(rows.get(j, {}).get("state") in ENDED for j in accepted):
                break
            time.sleep(0.5)
        check(result, http, server, accepted, journal)
    finally:
        server.stop()
    result.violations.extend(f"left running after the daemon stopped: {p}"
                             for p in _leftovers(server.data_dir / "runs"))
    result.wall_s = time.monotonic() - started
    return result


def check(result: ChaosResult, http: httpx.Client, server: ServerProcess, accepted: list[str],
          journal: Path) -> None:
    rows = {r["id"]: r for r in http.get("/v1/jobs").json()}
    result.states = {j: rows.get(j, {}).get("state", "lost") for j in accepted}
    bad = result.violations
    if sorted(rows) != sorted(accepted):
        bad.append(f"jobs in the store {sorted(rows)} != accepted {sorted(accepted)}")
    for jid in accepted:
        row = rows.get(jid)
        if row is None or row["state"] not in ENDED:
            result.lost += 1
            bad.append(f"{jid} never ended: {row and row['state']}")
            continue
        history = http.get(f"/v1/jobs/{jid}/metrics").json()["allocations"]
        terminal = [e for e in history if e["state"] in ENDED]
        if len(terminal) == 1:
            result.ended_once += 1
        else:
            bad.append(f"{jid} ended {len(terminal)} times: {terminal}")
        if row["state"] in ("failed", "cancelled") and not row["message"]:
            bad.append(f"{jid} {row['state']} without a reason")
        steps_log = server.data_dir / "runs" / jid / "steps.log"
        if steps_log.exists():
            twice = _steps_violations(jid, steps_log.read_text(), row["state"])
            result.ran_twice += bool(twice)
            bad.extend(twice)
    alive_now = [f"{jid}/{p.stem}" for p, pid, start in find_orphans(server.data_dir / "runs")
                 for jid in [p.parent.parent.name] if alive(pid, start)]
    if alive_now:
        bad.append(f"task processes alive after every job ended: {alive_now}")
    bad.extend(ledger_violations(journal))
    if result.states.get("victim") != "cancelled":
        bad.append(f"victim is {result.states.get('victim')}, not cancelled")
    if result.states.get("broken") != "failed":
        bad.append(f"broken is {result.states.get('broken')}, not failed")


def _steps_violations(jid: str, text: str, state: str) -> list[str]:
    """Steps run twice past a checkpoint, runs that overlap, or training finished more than once.

    A run that resumes at the final checkpoint and only says `done` trained nothing: it is the restart
    after a task died once the work was saved (a peer killed after rank 0 finished, or rank 0 killed between
    its last checkpoint and `done`), not a rerun; it finishes the training the earlier run did.
    """
    runs: list[dict[str, Any]] = []  # per run (a `start` line): pid, first step, checkpoint before it, times
    checkpoint = 0
    for line in text.splitlines():
        t, pid, what, *rest = line.split()
        if what == "start":
            runs.append({"pid": pid, "from": int(rest[0]), "ckpt": checkpoint, "t0": float(t), "t1": float(t),
                         "steps": 0, "done": False})
            continue
        if not runs or runs[-1]["pid"] != pid:
            return [f"{jid}: two runs interleave (pid {pid} wrote after another run started): {line}"]
        runs[-1]["t1"] = float(t)
        if what == "step":
            runs[-1]["steps"] += 1
        elif what == "ckpt":
            checkpoint = max(checkpoint, int(rest[0]))
        elif what == "done":
            runs[-1]["done"] = True
    out = []
    for run in runs:
        if run["from"] < run["ckpt"]:
            out.append(f"{jid}: a run started at step {run['from']} after checkpoint {run['ckpt']}: steps ran twice")
    for earlier, later in itertools.pairwise(runs):
        if later["t0"] < earlier["t1"]:
            out.append(f"{jid}: runs {earlier['pid']} and {later['pid']} overlap in time")
    trained = sum(1 for run in runs if run["done"] and run["steps"])
    # (killed after its final checkpoint, before `done`: the restart resumes there and only says `done`)
    resumed = any(run["done"] and not run["steps"] and run["from"] == checkpoint for run in runs)
    if state == "succeeded" and (trained > 1 or not (trained or resumed)):
        out.append(f"{jid}: finished training {trained} times")
    return out


def ledger_violations(journal: Path) -> list[str]:
    """Replay the engine's journal: no GPU held twice, no node over capacity, nothing booked before recovery."""
    out: list[str] = []
    capacity: dict[str, dict[str, Any]] = {}
    used: dict[str, list[int]] = {}  # node -> [cpu, memory]
    gpus: dict[int, str] = {}  # GPU id -> task holding it
    recovered = True
    for n, line in enumerate(journal.read_text().splitlines(), 1):
        entry = json.loads(line)
        op = entry["op"]
        if op == "reset":  # a daemon started: its engine knows nothing held; the old tasks must die first
            capacity, used, gpus, recovered = entry["nodes"], {}, {}, False
        elif op == "orphans-killed":
            recovered = True
        elif op == "take":
            node, task = entry["node"], entry["task"]
            if not recovered:
                out.append(f"journal line {n}: {task} booked before the dead daemon's tasks were killed")
            cpu_mem = used.setdefault(node, [0, 0])
            cpu_mem[0] += entry["cpu"]
            cpu_mem[1] += entry["memory"]
            if cpu_mem[0] > capacity[node]["cpu"] or cpu_mem[1] > capacity[node]["memory"]:
                out.append(f"journal line {n}: node {node} over capacity after {task}: {cpu_mem}")
            for gpu in entry["gpus"]:
                if gpu in gpus:
                    out.append(f"journal line {n}: GPU {gpu} given to {task} while {gpus[gpu]} holds it")
                gpus[gpu] = task
        elif op == "give":
            cpu_mem = used.setdefault(entry["node"], [0, 0])
            cpu_mem[0] -= entry["cpu"]
            cpu_mem[1] -= entry["memory"]
            for gpu in entry["gpus"]:
                gpus.pop(gpu, None)
    return out
