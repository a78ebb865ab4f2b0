"""How a job's end is read from its tasks' exit codes after a restart of the daemon (`recovery.judge`).

The live engine's side of the same rule (an all-reduce worker crashing after worker-0 exited 0) runs real
processes in tests/test_local_engine.py; here the exit files a dead daemon's tasks left are written directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmaster.engines.base import Outcome
from trainmaster.engines.local.recovery import judge, write_manifest
from trainmaster.engines.local.tasks import exit_file


def left(job_dir: Path, codes: dict[str, int | None]) -> None:
    write_manifest(job_dir, 1, list(codes))
    for name, code in codes.items():
        if code is not None:  # no file: killed, or still running when the daemon went down
            exit_file(job_dir, 1, name).write_text(str(code))


@pytest.mark.parametrize(("codes", "outcome", "named"), [
    ({"worker-0": 0, "worker-1": 0}, Outcome.SUCCEEDED, "every worker of attempt 1 exited 0"),
    ({"worker-0": 0, "worker-1": 134}, Outcome.SUCCEEDED, "worker-1 exited with code 134 after worker-0 finished"),
    ({"worker-0": 1, "worker-1": 134}, Outcome.FAILED, "exited with code"),
    ({"worker-0": None, "worker-1": 134}, Outcome.FAILED, "worker-1 exited with code 134"),
    ({"worker-0": 0, "worker-1": 134, "ps-0": 0}, Outcome.FAILED, "worker-1 exited with code 134"),
])
def test_a_crash_after_worker_0_finished_counts_only_for_all_reduce_jobs(
        tmp_path: Path, codes: dict[str, int | None], outcome: Outcome, named: str) -> None:
    job_dir = tmp_path / "job"
    left(job_dir, codes)
    found = judge(job_dir)
    assert found is not None and found.outcome is outcome and named in found.detail, found
