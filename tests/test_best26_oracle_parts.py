"""`bench.oracle_goodput`'s one-node parts split (best26): `unseen-below`, `unseen-above` and `unseen-first` let the
truth's steps/s in only at their own sizes, and `unseen-below` + `unseen-above` are `unseen-one`'s sizes."""

from __future__ import annotations

import sys
from pathlib import Path

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, JobSpec, Role, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Config
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.oracle_goodput import OracleBook, counts_of, regimes

SPEC = simple_job("a", 4, min_gpus=1, max_gpus=16, adaptive_batch=BatchRange(128, 4096, 2048), job_type="cifar10")
SIBLING = simple_job("b", 4, min_gpus=1, max_gpus=16, adaptive_batch=BatchRange(128, 4096, 2048),
                     job_type="cifar10")


def _report(book: ModelBook, spec: JobSpec, i: int, workers: int, truth: PeerTruth, batch: int = 2048) -> None:
    """A report from `workers` packed on 4-GPU nodes, at the truth's steps/s there."""
    alloc = Allocation.of(Placement(Role.WORKER, f"n{k // 4}") for k in range(workers))
    speed = truth.at_counts(counts_of(workers, -(-workers // 4)), batch, 0.0).steps_per_s
    book.observe(spec.name, spec, Report(float(i), spec.name, 10 * (i + 1), loss=1.0, steps_per_s=speed,
                                         allocation=alloc, batch=batch, grad_sqr=1.0, grad_var=0.05))


def test_regimes_split_the_one_node_sizes_at_the_largest_size_run() -> None:
    seen = frozenset({(1, 1), (2, 1), (8, 2)})
    assert regimes(Config(2, 0, 1), seen) == ("seen",)
    assert regimes(Config(12, 0, 3), seen) == ("unseen-multi",)
    assert regimes(Config(4, 0, 1), seen) == ("unseen-one", "unseen-below")  # under 8, the most run
    assert regimes(Config(3, 0, 1), frozenset({(1, 1), (2, 1)})) == ("unseen-one", "unseen-above")
    assert regimes(Config(4, 0, 1), frozenset({(4, 2)})) == ("unseen-one", "unseen-above")  # not under 4
    assert regimes(Config(3, 0, 1), frozenset()) == ("unseen-first",)
    assert regimes(Config(8, 0, 2), frozenset()) == ("unseen-multi",)


def _truth(shared_data: Path) -> PeerTruth:
    return PeerTruth.of(load_profile(shared_data / "pollux" / "profiles" / "cifar10"), 2048)


def test_below_and_above_let_the_truth_in_only_at_their_sizes(shared_data: Path) -> None:
    truth = _truth(shared_data)
    fitted_book = ModelBook()
    books = {p: OracleBook({"a": truth}, law=f"part-unseen-{p}", reported_only=True) for p in ("below", "above")}
    for book in (fitted_book, *books.values()):
        for i, w in enumerate((1, 2, 1, 2)):  # runs on 1 and 2 GPUs (below: none; above: 3 and 4)
            _report(book, SPEC, i, w, truth, batch=(512, 1024, 1024, 512)[i])
        for i, w in enumerate((1, 2, 1)):  # a sibling that ran 4 GPUs: the type's fit reaches a node
            _report(book, SIBLING, i, w, truth)
    fitted = fitted_book.model("a", SPEC).goodput
    assert fitted is not None
    for part, book in books.items():
        got = book.model("a", SPEC).goodput
        assert got is not None
        for w in (1, 2, 3, 4):
            c = Config(w, 0, 1, 1024.0)
            true = truth.at_counts(counts_of(w, 1), 1024, 0.0).steps_per_s
            expect = true if part == "above" and w > 2 else fitted.speed.steps_per_s(c)
            assert got.speed.steps_per_s(c) == expect, (part, w)
        c = Config(8, 0, 2, 1024.0)  # multi-node: the fitted law in both
        assert got.speed.steps_per_s(c) == fitted.speed.steps_per_s(c)
    # a job that ran 4 GPUs: 2 and 3 are below
    book = OracleBook({"a": truth}, law="part-unseen-below", reported_only=True)
    for i, w in enumerate((1, 4, 1)):
        _report(book, SPEC, i, w, truth, batch=(512, 2048, 1024)[i])
    got = book.model("a", SPEC).goodput
    assert got is not None
    for w in (2, 3):
        c = Config(w, 0, 1, 1024.0)
        assert got.speed.steps_per_s(c) == truth.at_counts(counts_of(w, 1), 1024, 0.0).steps_per_s


def test_first_reads_the_truth_at_one_node_sizes_until_the_first_report(shared_data: Path) -> None:
    truth = _truth(shared_data)
    book = OracleBook({"a": truth}, law="part-unseen-first")
    plain = ModelBook()
    for b in (book, plain):
        for i, w in enumerate((1, 2, 3, 4, 8, 12)):  # the sibling gives the type a prior (6 shapes)
            _report(b, SIBLING, i, w, truth, batch=(512, 1024, 1536, 2048, 2048, 3072)[i])
    model, fitted = book.model("a", SPEC), plain.model("a", SPEC)
    assert model.speed is not None and fitted.speed is not None and fitted.basis == "type prior"
    for w in (1, 2, 3, 4):
        c = Config(w, 0, 1, 2048.0)
        assert model.speed.steps_per_s(c) == truth.at_counts(counts_of(w, 1), 2048, 0.0).steps_per_s
        assert model.speed.steps_per_s(c) != fitted.speed.steps_per_s(c)
    c = Config(8, 0, 2, 2048.0)
    assert model.speed.steps_per_s(c) == fitted.speed.steps_per_s(c)  # multi-node: the prior
    _report(book, SPEC, 0, 2, truth)
    _report(plain, SPEC, 0, 2, truth)
    after, fitted = book.model("a", SPEC), plain.model("a", SPEC)  # reported: the fitted model
    assert after.speed is not None and fitted.speed is not None
    assert after.speed.steps_per_s(Config(4, 0, 1, 2048.0)) == fitted.speed.steps_per_s(Config(4, 0, 1, 2048.0))
