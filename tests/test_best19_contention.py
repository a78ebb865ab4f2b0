"""best19's diagnosis bench (bench/contention.py): a job's JCT split and the cluster's idle GPUs while jobs wait."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmaster.controller.records import JobRecord
from trainmaster.core.job import simple_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.contention import idle_while_waiting, split


def _record(jid: str, submit: float, start: float, finish: float) -> JobRecord:
    return JobRecord(jid, simple_job(jid, 1, min_gpus=1, max_gpus=8), submit, first_start=start, finish_time=finish)


def test_a_jobs_jct_splits_into_queueing_preempted_waits_delays_and_the_rest() -> None:
    rec = _record("a", 0.0, 100.0, 1_000.0)
    # starts on 2 GPUs, grows to 4, shrinks to 3, preempted for 200 s, resumes on 1 GPU
    steps = [(100.0, 2), (300.0, 4), (400.0, 3), (500.0, 0), (700.0, 1)]
    got = split(rec, steps, 30.0)
    assert got["jct"] == 1_000.0 and got["queue"] == 100.0
    assert got["preempted"] == 200.0
    assert got["allocs"] == 4 and got["shrinks"] == 1  # a resume (0 -> 1) is no shrink
    assert got["delays"] == 120.0 and got["run rest"] == 1_000.0 - 100.0 - 200.0 - 120.0
    assert got["gpu_s"] == 2 * 200 + 4 * 100 + 3 * 100 + 1 * 300
    assert got["delay GPU-s"] == 30 * (2 + 4 + 3 + 1)  # the GPUs held through each (re)start's delay


def test_idle_gpus_count_only_while_some_job_waits() -> None:
    a, b = _record("a", 0.0, 0.0, 100.0), _record("b", 50.0, 80.0, 100.0)
    steps = {"a": [(0.0, 2), (100.0, 0)], "b": [(80.0, 4), (120.0, 0)]}  # (b's stop told after its finish)
    idle, used, span = idle_while_waiting({"a": a, "b": b}, steps, 8)
    assert span == 100.0
    assert used == pytest.approx(2 * 100 + 4 * 20)
    assert idle == pytest.approx((8 - 2) * 30)  # b waited from 50 to 80 with 6 GPUs idle
