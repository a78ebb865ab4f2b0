"""Chaos: ~10 real jobs while a seeded driver kill -9s the daemon 3 times, SIGKILLs 5 task processes and
cancels a job. Every accepted job ends exactly once, nothing runs twice, nothing leaks, no GPU is booked twice.

The driver and the checks are in tests/chaos.py (bench/chaos.py runs more seeds for BENCHMARKS.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import run_chaos

pytestmark = pytest.mark.slow


def test_chaos_every_job_ends_exactly_once_and_nothing_runs_twice(tmp_path: Path) -> None:
    result = run_chaos(seed=1, workdir=tmp_path)
    assert result.violations == []
    assert result.submitted == 10 and result.ended_once == 10 and result.lost == 0 and result.ran_twice == 0
    assert (result.daemon_kills, result.cancelled) == (3, 1) and result.task_kills >= 3
    assert result.states["victim"] == "cancelled" and result.states["broken"] == "failed"
    assert all(result.states[j] == "succeeded" for j in ("elastic-a", "fixed-a", "ps", "plain", "urgent"))


def test_the_checks_catch_a_step_run_twice_and_overlapping_runs() -> None:
    from chaos import _steps_violations

    fine = "1 a start 0\n2 a step 0\n3 a ckpt 1\n4 a step 1\n5 b start 1\n6 b step 1\n7 b ckpt 2\n8 b done\n"
    assert _steps_violations("j", fine, "succeeded") == []
    rerun = "1 a start 0\n2 a step 0\n3 a ckpt 1\n5 b start 0\n6 b step 0\n7 b done\n"
    assert "ran twice" in _steps_violations("j", rerun, "succeeded")[0]
    overlap = "1 a start 0\n2 b start 0\n3 a step 0\n"
    assert "interleave" in _steps_violations("j", overlap, "running")[0]
    twice = "1 a start 0\n2 a step 0\n3 a done\n4 b start 0\n5 b step 0\n6 b done\n"
    assert "finished training 2 times" in _steps_violations("j", twice, "succeeded")[0]
    resumed_at_the_end = "1 a start 0\n2 a step 0\n3 a ckpt 1\n4 a done\n5 b start 1\n6 b done\n"
    assert _steps_violations("j", resumed_at_the_end, "succeeded") == []
    killed_before_done = "1 a start 0\n2 a step 0\n3 a ckpt 1\n5 b start 1\n6 b done\n"
    assert _steps_violations("j", killed_before_done, "succeeded") == []
    never_done = "1 a start 0\n2 a step 0\n3 a ckpt 1\n"
    assert "finished training 0 times" in _steps_violations("j", never_done, "succeeded")[0]


def test_the_checks_catch_a_gpu_booked_twice_and_a_booking_before_recovery(tmp_path: Path) -> None:
    from chaos import ledger_violations

    journal = tmp_path / "ledger.jsonl"
    reset = '{"op": "reset", "nodes": {"n": {"cpu": 2000, "memory": 100, "gpus": [0]}}}'
    take = '{"op": "take", "node": "n", "task": "%s", "cpu": 1000, "memory": 10, "gpus": [0]}'
    journal.write_text("\n".join([reset, '{"op": "orphans-killed"}', take % "a", take % "b", reset, take % "c"]))
    found = ledger_violations(journal)
    assert any("GPU 0 given to b while a holds it" in v for v in found)
    assert any("c booked before" in v for v in found)
