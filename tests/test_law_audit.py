"""The speed law's error benches (bench/speed_predict.py, bench/law_audit.py): they read the truth, change nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, Target, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Config, Form, features
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth, peer_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.law_audit import AuditBook
from bench.speed_predict import errors, truth


def _alloc(*per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, f"n{i}") for i, n in enumerate(per_node) for _ in range(n))


def test_the_micro_batch_features_count_the_fixed_term_once_per_micro_batch(shared_data: Path) -> None:
    model = peer_model(load_profile(shared_data / "pollux" / "profiles" / "yolov3"))
    c, speed, x = truth(model, [3], 32)  # local 11 over yolov3's cap of 8: two micro-batches
    assert x[:6] == (2.0, *features(Form.ALLREDUCE, c)[1:]) and len(x) == 8 and speed > 0
    assert truth(model, [4], 32)[2][0] == 1.0  # local 8: one


def test_the_prediction_table_is_exact_where_the_law_is(shared_data: Path) -> None:
    for micro in (False, True):  # yolov3 on 3 GPUs at 32 accumulates: only the micro-batch law sees it
        errs = errors("yolov3", 32, "one-multi", micro)
        assert len(errs) == 5
    assert errors("yolov3", 32, "one-multi")[-1] == pytest.approx(72, abs=1)  # the twelfth look's +72%
    assert abs(errors("yolov3", 32, "one-multi", True)[-1]) < 72


def test_the_audit_book_publishes_what_the_book_does_and_records_errors(shared_data: Path) -> None:
    truth_ = PeerTruth.of(load_profile(shared_data / "pollux" / "profiles" / "cifar10"), 2048)
    spec = simple_job("cifar10-1", 8, min_gpus=1, max_gpus=16, target=Target(steps=round(truth_.total_steps)),
                      adaptive_batch=BatchRange(128, 4096, 2048))
    audit, book = AuditBook({"cifar10-1": truth_}), ModelBook()
    for step, alloc in enumerate((_alloc(1), _alloc(4), _alloc(4, 4)), start=1):  # three sizes: an own fit
        ran = truth_.at_batch(alloc, 2048, 10 * step)
        report = Report(time=step, job_id="cifar10-1", step=10 * step, steps_per_s=ran.steps_per_s, batch=2048,
                        grad_sqr=1.0, grad_var=1.0)
        for b in (audit, book):
            b.observe("cifar10-1", spec, report, alloc)
    ours, theirs = audit.published("cifar10-1", spec), book.published("cifar10-1", spec)
    assert ours.basis == theirs.basis and ours.remaining == theirs.remaining
    assert ours.goodput is not None and theirs.goodput is not None
    assert ours.goodput.best(Config(8, nodes=2)) == theirs.goodput.best(Config(8, nodes=2))
    regimes = {regime for _, regime in audit.errors}
    assert "seen-multi" in regimes and "unseen-one" in regimes
