"""The goodput oracle (bench/oracle_goodput.py): its predictions are what the sim engine runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, Target, simple_job
from trainmaster.models.speed import Config
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.oracle_goodput import UNPACED, OracleBook, PartSteps, _without_caps, counts_of


def _alloc(*per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, f"n{i}") for i, n in enumerate(per_node) for _ in range(n))


def test_counts_pack_the_fewest_nodes_and_spread_the_rest() -> None:
    assert counts_of(6, 2) == [4, 2]
    assert counts_of(8, 2) == [4, 4]
    assert counts_of(6, 3) == [2, 2, 2]
    assert counts_of(5, 3) == [2, 2, 1]
    assert counts_of(2, 4) == [1, 1]  # never more nodes than workers


def test_the_oracles_goodput_is_the_rate_the_engine_runs_at(shared_data: Path) -> None:
    truth = PeerTruth.of(load_profile(shared_data / "pollux" / "profiles" / "cifar10"), 2048)
    spec = simple_job("a", 8, min_gpus=1, max_gpus=16, target=Target(steps=round(truth.total_steps)),
                      adaptive_batch=BatchRange(128, 4096, 2048))
    book = OracleBook({"a": truth}, paced=False)
    fresh = book.model("a", spec)
    assert fresh.basis == "oracle" and fresh.max_workers == UNPACED
    assert fresh.remaining == pytest.approx(truth.total_steps)
    # A report 40 epochs in: the model follows the job's step (its epoch's gain) and its remaining steps.
    step = int(truth.model.cumulative_steps(2048.0)[40]) + 1
    alloc = _alloc(4, 4)
    book.observe("a", spec, Report(time=0.0, job_id="a", step=step, steps_per_s=1.0), alloc)
    model = book.model("a", spec)
    assert model.remaining == pytest.approx(truth.total_steps - step)
    assert model.goodput is not None
    for batch in (1024, 4096):
        ran = truth.at_batch(alloc, batch, step)  # what the sim engine runs it at (`_set_rate`; test_goodput_sim)
        assert model.goodput.goodput(Config(8, 0, 2), batch) == pytest.approx(ran.rate, rel=1e-12)
    best, value = model.goodput.best(Config(8, 0, 2))
    assert value == pytest.approx(truth.at_batch(alloc, best, step).rate)
    assert value >= truth.at_batch(alloc, 2048, step).rate  # the best batch beats the submitted one
    # Early on (noise scale small) a larger batch gains less per sample than later: the best batch grows.
    assert fresh.best_batch(8, 0, 2) is not None and model.best_batch(8, 0, 2) is not None
    assert model.best_batch(8, 0, 2) > fresh.best_batch(8, 0, 2)  # type: ignore[operator]


def test_mode_nocap_strips_only_the_local_caps(shared_data: Path) -> None:
    from trainmaster.workloads.pollux import load_pollux

    wl = load_pollux(shared_data / "pollux" / "workloads" / "workload-1.csv", shared_data / "pollux" / "profiles",
                     max_factor=2.0, fidelity="pollux")
    bare = _without_caps(wl)
    assert all(j.spec.adaptive_batch is not None and j.spec.adaptive_batch.local_max for j in wl.jobs)
    for old, new in zip(wl.jobs, bare.jobs, strict=True):
        assert new.spec.adaptive_batch is not None and old.spec.adaptive_batch is not None
        assert new.spec.adaptive_batch.local_max is None
        assert new.spec.adaptive_batch == BatchRange(old.spec.adaptive_batch.min, old.spec.adaptive_batch.max,
                                                      old.spec.adaptive_batch.base)
        assert new.truth is old.truth and new.submit_time == old.submit_time


def test_part_steps_reads_the_truth_only_in_its_regime(shared_data: Path) -> None:
    """Mode `part-P`: the truth's steps/s at the sizes of one `bench.law_audit` regime, the fitted law's elsewhere."""
    truth = PeerTruth.of(load_profile(shared_data / "pollux" / "profiles" / "cifar10"), 2048)

    class Flat:
        def steps_per_s(self, c: Config) -> float:
            return 1.0

    seen = frozenset({(1, 1), (8, 2)})
    sizes = {"seen": [Config(1, batch=256.0), Config(8, nodes=2, batch=1024.0)],
             "unseen-one": [Config(2, batch=256.0), Config(4, batch=512.0)],
             "unseen-multi": [Config(16, nodes=4, batch=2048.0), Config(5, nodes=2, batch=640.0)]}
    for part in sizes:
        law = PartSteps(Flat(), truth, seen, part)
        for regime, configs in sizes.items():
            for c in configs:
                want = truth.at_counts(counts_of(c.workers, c.nodes), int(c.batch), 0.0).steps_per_s
                assert law.steps_per_s(c) == (want if regime == part else 1.0)
