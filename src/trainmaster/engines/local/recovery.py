"""What a job's last attempt left on disk, judged after the daemon that ran it died.

At every launch the engine writes the attempt's task list
(`exits/attempt-<n>/manifest.json`); each task's wrapper writes its exit code
beside it when the task ends (`tasks.exit_file`). A new daemon reads these
instead of guessing from the store, so a job that finished while no daemon
was watching is never run again, and one that crashed is counted as a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainmaster.engines.base import Outcome, Recovered
from trainmaster.engines.gang import EXIT_PREEMPTED, complete_despite
from trainmaster.engines.local.tasks import exit_file, read_exit


def write_manifest(job_dir: Path, attempt: int, tasks: list[str]) -> None:
    """Record which tasks an attempt launches, before launching any (atomic)."""
    folder = job_dir / "exits" / f"attempt-{attempt}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps({"tasks": tasks}))
    os.replace(tmp, folder / "manifest.json")


def _last_attempt(job_dir: Path) -> int | None:
    numbers = [int(p.name.split("-")[1]) for p in (job_dir / "exits").glob("attempt-*")
               if p.name.split("-")[1].isdigit() and (p / "manifest.json").is_file()]
    return max(numbers, default=None)


def last_step(report_file: Path, block: int = 4096) -> int | None:
    """The step of the last complete progress line (reads only the file's end)."""
    try:
        with open(report_file, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - block))
            lines = f.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int):
            return step
    return None


def judge(job_dir: Path) -> Recovered | None:
    """How the job's last attempt ended, from its exit codes; None when it never launched."""
    attempt = _last_attempt(job_dir)
    if attempt is None:
        return None
    try:
        tasks = [str(t) for t in json.loads((job_dir / "exits" / f"attempt-{attempt}" / "manifest.json")
                                            .read_text())["tasks"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    codes = {name: read_exit(exit_file(job_dir, attempt, name)) for name in tasks}
    job_id = job_dir.name
    workers = [n for n in tasks if n.startswith("worker-")]
    allreduce = not any(n.startswith("ps-") for n in tasks)  # the manifest names tasks; only PS jobs have servers
    crashed = [w for w in workers if complete_despite(w, codes, allreduce)]
    if workers and all(codes[w] == 0 or w in crashed for w in workers):
        ended = max(exit_file(job_dir, attempt, w).stat().st_mtime for w in workers)
        detail = f"worker-0 of attempt {attempt} exited 0" + "".join(
            f"; {w} exited with code {codes[w]} after worker-0 finished" for w in crashed) \
            if crashed else f"every worker of attempt {attempt} exited 0"
        return Recovered(job_id, attempt, Outcome.SUCCEEDED, detail, ended,
                         last_step(job_dir / "reports" / f"attempt-{attempt}.jsonl"))
    bad = [(n, c) for n, c in codes.items() if c not in (None, 0, EXIT_PREEMPTED)]
    if bad:
        name, code = bad[0]
        return Recovered(job_id, attempt, Outcome.FAILED,
                         f"{name} exited with code {code} (log: {job_dir / f'{name}.log'})")
    return Recovered(job_id, attempt, Outcome.INTERRUPTED, f"attempt {attempt} did not finish")


def judge_attempts(run_dir: Path) -> dict[str, Recovered]:
    """`judge` for every job folder under `run_dir` that has an attempt."""
    out = {}
    for job_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()) if run_dir.is_dir() else ():
        found = judge(job_dir)
        if found is not None:
            out[found.job_id] = found
    return out
