"""best21's rate split (bench/contention.py `--rates`): a run's time into the bound's share and three losses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.contention import Piece, best_rate, cap_rate, epoch_of, rate_split
from bench.pollux_bound import DATA, best_alone

from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

pytestmark = pytest.mark.skipif(not (DATA / "profiles" / "cifar10").is_dir(), reason="needs the Pollux profiles")


def _truth() -> PeerTruth:
    profile = load_profile(DATA / "profiles" / "cifar10")
    return PeerTruth.of(profile, sorted(profile.validation)[1])  # (not the smallest: its gain moves by epoch)


def test_a_run_splits_into_batch_placement_and_gpu_losses() -> None:
    truth = _truth()
    e = 1
    done = truth.model.cumulative_steps(float(truth.batch_size))[e]
    best4, spread, eight = (best_rate(truth, "cifar10", c, e) for c in ((4,), (2, 2), (4, 4)))
    assert cap_rate(truth, "cifar10", 8, e) >= eight and cap_rate(truth, "cifar10", 8, e) >= best4 > spread > 0
    pieces = [Piece(100.0, 100.0 * best4, done, (4,), 1.1 * best4, 0.02, -0.2),  # at its best on 4 packed
              Piece(100.0, 50.0 * spread, done, (2, 2), None)]  # spread, at half the best rate there
    got = rate_split(pieces, truth, "cifar10", 8)
    bound = cap_rate(truth, "cifar10", 8, e)
    assert got["ran"] == 200.0
    assert got["batch"] == pytest.approx(50.0)
    assert got["placement"] == pytest.approx(50.0 * spread / spread - 50.0 * spread / best4)
    assert got["GPUs lost"] == pytest.approx((100.0 * best4 + 50.0 * spread) * (1 / best4 - 1 / bound))
    assert got["at bound"] + got["batch"] + got["placement"] + got["GPUs lost"] == pytest.approx(200.0)
    assert got["pred err %"] == pytest.approx(10.0) and got["pred |err| %"] == pytest.approx(10.0)
    assert got["steps/s err %"] == pytest.approx(2.0) and got["2x err %"] == pytest.approx(-20.0)  # (timed: piece 1)


def test_the_bounds_share_of_a_whole_run_is_the_bound() -> None:
    truth = _truth()
    ends = truth.model.cumulative_steps(float(truth.batch_size))
    pieces = [Piece(1.0, ends[e + 1] - ends[e], ends[e], (1,), None) for e in range(truth.model.epochs)]
    assert [epoch_of(truth, p.done) for p in pieces] == list(range(truth.model.epochs))
    assert rate_split(pieces, truth, "cifar10", 8)["at bound"] == pytest.approx(best_alone("cifar10", 8)[0])
