"""`bench.oracle_goodput`'s part and throughput modes keep the fitted law's noise-scale batch (`GoodputSpeed.at`;
best25: they dropped it, so with `NOISE_GROWTH` on their gain was read as if measured at the base batch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.oracle_goodput import OracleBook


@pytest.mark.parametrize("law", ["part-unseen-multi", "part-seen", "throughput"])
def test_an_oracle_mode_reads_the_gain_as_the_fitted_law_does(shared_data: Path, law: str) -> None:
    truth = PeerTruth.of(load_profile(shared_data / "pollux" / "profiles" / "cifar10"), 2048)
    spec = simple_job("a", 4, min_gpus=1, max_gpus=16, adaptive_batch=BatchRange(128, 4096, 2048))
    books = (ModelBook(), OracleBook({"a": truth}, law=law))
    for book in books:  # three one-node sizes at batch 512 (not the base): an own fit, the noise scale read at 512
        for i, w in enumerate((1, 2, 4)):
            alloc = Allocation.of(Placement(Role.WORKER, "n0") for _ in range(w))
            book.observe("a", spec, Report(float(i), "a", 10 * (i + 1), loss=1.0, steps_per_s=2.0 * w, allocation=alloc,
                                           batch=512, grad_sqr=1.0, grad_var=0.05))
    fitted, oracle = (book.model("a", spec).goodput for book in books)
    assert fitted is not None and oracle is not None and fitted.at == 512.0
    assert oracle.at == fitted.at
    for batch in (256, 512, 1024, 4096):
        assert oracle.gain(batch) == fitted.gain(batch)
