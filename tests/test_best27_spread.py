"""best27's placement measure (bench/contention.py `--spread`): GPU-s run on more nodes than the size needs, and
the truth's charge for it at the batch held."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.contention import Piece, spread_split
from bench.pollux_bound import DATA

from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

pytestmark = pytest.mark.skipif(not (DATA / "profiles" / "cifar10").is_dir(), reason="needs the Pollux profiles")


def test_spread_pieces_are_charged_the_truths_packed_rate_at_their_batch() -> None:
    profile = load_profile(DATA / "profiles" / "cifar10")
    truth = PeerTruth.of(profile, sorted(profile.validation)[1])
    done = truth.model.cumulative_steps(float(truth.batch_size))[1]
    batch = 2 * truth.batch_size
    spread = truth.at_counts((2, 1, 1), batch, done).rate  # 4 GPUs on 3 nodes
    whole = truth.at_counts((4,), batch, done).rate
    six = truth.at_counts((4, 2), batch, done).rate
    assert spread != whole
    pieces = [Piece(100.0, 100.0 * whole, done, (4,), None, batch=batch),  # packed: no charge
              Piece(50.0, 50.0 * spread, done, (2, 1, 1), None, batch=batch),  # 2 nodes more than needed
              Piece(30.0, 30.0 * six, done, (4, 2), None, batch=batch),  # 6 on 2 nodes: packed
              Piece(20.0, 20.0 * spread, done, (1, 1, 1, 1), None)]  # no batch: counted in the GPU-s only
    got = spread_split(pieces, truth)
    assert got["GPU-s"] == pytest.approx(400.0 + 200.0 + 180.0 + 80.0)
    assert got["spread GPU-s"] == pytest.approx(200.0) and got["spread time"] == pytest.approx(50.0)
    assert got["extra node-s"] == pytest.approx(100.0)
    assert got["spread loss"] == pytest.approx(50.0 - 50.0 * spread / whole)
    assert got["slow s"] == pytest.approx(50.0 * (1.0 - spread / whole))
    assert got["one-node spread GPU-s"] == pytest.approx(200.0) and got["one-node loss"] == got["spread loss"]
    wide = truth.at_counts((2, 2, 2), batch, done).rate  # 6 on 3 nodes: spread, not a one-node size
    more = spread_split([Piece(10.0, 10.0 * wide, done, (2, 2, 2), None, batch=batch)], truth)
    assert more["spread loss"] == pytest.approx(10.0 - 10.0 * wide / six) and more["one-node spread GPU-s"] == 0.0

