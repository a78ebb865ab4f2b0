"""best28's placement headroom (bench/contention.py `--widths`): GPU-s on exactly two nodes, and what the best of a
few widths would have saved at the size and batch each piece ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.contention import Piece, even_over, width_split, widths
from bench.pollux_bound import DATA

from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

pytestmark = pytest.mark.skipif(not (DATA / "profiles" / "yolov3").is_dir(), reason="needs the Pollux profiles")


def test_the_widths_tried() -> None:
    assert even_over(8, 3) == (3, 3, 2) and even_over(2, 3) == (1, 1) and even_over(5, 0) == (5,)
    assert widths(8, 16) == [(4, 4), (3, 3, 2), (2, 2, 2, 2), (1,) * 8, (3, 3, 2)]
    assert widths(40, 16)[2] == (3,) * 8 + (2,) * 8  # two a node would take 20 nodes: 16 at most
    assert widths(1, 16) == [(1,)] * 5


def test_two_node_pieces_and_the_best_width_saved() -> None:
    profile = load_profile(DATA / "profiles" / "yolov3")
    truth = PeerTruth.of(profile, min(profile.validation))
    batch = 4 * truth.batch_size
    rate = {c: truth.at_counts(c, batch, 0.0).rate for c in [(2, 2), (4,), (4, 4), (2, 2, 2, 2), (1, 1, 1, 1),
                                                               (2, 1, 1)]}
    assert rate[(2, 2)] < rate[(1, 1, 1, 1)] < rate[(4,)] and rate[(4, 4)] < rate[(2, 2, 2, 2)]  # two nodes: slow
    pieces = [Piece(100.0, 100.0 * rate[(2, 2)], 0.0, (2, 2), None, batch=batch),  # a one-node size on two nodes
              Piece(10.0, 10.0 * rate[(4,)], 0.0, (4,), None, batch=batch),  # packed: nothing better
              Piece(5.0, 5.0 * rate[(2, 1, 1)], 0.0, (2, 1, 1), None, batch=batch),  # three nodes: not two
              Piece(50.0, 50.0 * rate[(4, 4)], 0.0, (4, 4), None, batch=batch),  # 8 on two full nodes
              Piece(20.0, 1.0, 0.0, (1, 1), None)]  # no batch: GPU-s only
    got = width_split(pieces, truth, 16)
    assert got["GPU-s"] == pytest.approx(400.0 + 40.0 + 20.0 + 400.0 + 40.0)
    assert got["one GPU-s"] == pytest.approx(500.0) and got["one two-node GPU-s"] == pytest.approx(440.0)
    assert got["multi GPU-s"] == got["multi two-node GPU-s"] == pytest.approx(400.0)
    best8 = max(truth.at_counts(c, batch, 0.0).rate for c in widths(8, 16))
    assert best8 >= rate[(2, 2, 2, 2)]
    assert got["one saved"] == pytest.approx(100.0 - 100.0 * rate[(2, 2)] / rate[(4,)]  # packed: the best for 4
                                             + 5.0 - 5.0 * rate[(2, 1, 1)] / rate[(4,)])
    assert got["multi saved"] == pytest.approx(50.0 - 50.0 * rate[(4, 4)] / best8)
