"""bench.philly_replay writes its own table and never overwrites a results file it did not write
(it once rewrote sim-perf.md, the hand-written history, with a fresh table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bench import philly_replay

DATA = philly_replay.DATA


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["philly_replay", *args])
    return philly_replay.main()


def test_a_hand_written_file_is_not_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim-perf.md"
    out.write_text("# Simulator performance: the Philly replay\n\nhand-written sections\n")
    assert _main(monkeypatch, "--out", str(out), "--data", str(tmp_path / "absent.csv")) == 2
    assert out.read_text().endswith("hand-written sections\n")
    assert "--out" in capsys.readouterr().err


def test_its_own_table_is_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not DATA.is_file():
        pytest.skip(f"{DATA} not found: the replay needs ../shared/data")
    out = tmp_path / "replay.md"
    args = ("--out", str(out), "--data", str(DATA), "--policies", "fifo", "--limit", "20")
    assert _main(monkeypatch, *args) == 0
    first = out.read_text()
    assert first.splitlines()[0] == philly_replay.MARKER
    assert "| fifo |" in first
    assert _main(monkeypatch, *args) == 0  # its own file: rewritten, not refused
    assert out.read_text().splitlines()[0] == philly_replay.MARKER
