"""Atomic checkpoints: a save killed half-way never leaves a file that `load` would read."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trainmaster.train.checkpoint import FILENAME, load, save_atomic


def test_save_then_load_round_trips_and_replaces(tmp_path: Path) -> None:
    assert load(tmp_path) is None
    save_atomic({"step": 1, "w": torch.ones(3)}, tmp_path)
    save_atomic({"step": 2, "w": torch.full((3,), 2.0)}, tmp_path)
    payload = load(tmp_path)
    assert payload is not None and payload["step"] == 2
    assert torch.equal(payload["w"], torch.full((3,), 2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILENAME]  # no temporary files left


_KILLED_WRITER = textwrap.dedent("""
    import io, sys, time, torch
    from trainmaster.train import checkpoint
    checkpoint.save_atomic({"step": 1, "w": torch.zeros(1000)}, sys.argv[1])
    real_save = torch.save
    def half_save(obj, f):  # write half the bytes, then hang: the parent kills us here
        buf = io.BytesIO(); real_save(obj, buf); data = buf.getvalue()
        f.write(data[: len(data) // 2]); f.flush()
        print("HALF", flush=True); time.sleep(60)
    torch.save = half_save
    checkpoint.save_atomic({"step": 2, "w": torch.ones(1000)}, sys.argv[1])
""")


@pytest.mark.slow  # a real process
def test_a_save_killed_mid_write_is_never_loaded(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "HALF"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = list(tmp_path.glob(".tmp-*"))
    assert len(partial) == 1  # the kill really hit the middle of a write
    with pytest.raises(Exception):  # noqa: B017 - any unpickling error: the half file is garbage
        torch.load(partial[0], weights_only=False)
    payload = load(tmp_path)
    assert payload is not None and payload["step"] == 1  # the previous checkpoint, whole
    assert torch.equal(payload["w"], torch.zeros(1000))
    save_atomic({"step": 3}, tmp_path)  # the next save sweeps the debris
    assert not list(tmp_path.glob(".tmp-*"))
    assert load(tmp_path) == {"step": 3}
