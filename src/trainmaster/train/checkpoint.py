"""Atomic checkpoints: write a temporary file, fsync, rename over the old one.

A reader only ever opens `checkpoint.pt`, which `os.replace` swaps in whole,
so a task killed in the middle of `save` leaves the previous checkpoint intact
(the half-written `.tmp-*` file is never loaded and is removed on the next save).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

FILENAME = "checkpoint.pt"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(payload: dict[str, Any], directory: str | os.PathLike[str]) -> Path:
    """Write `payload` to `directory/checkpoint.pt` so that it is either wholly old or wholly new."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".tmp-*"):
        stale.unlink(missing_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        final = folder / FILENAME
        os.replace(tmp_name, final)
        _fsync_dir(folder)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return final


def load(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The last complete checkpoint in `directory`, or None when there is none."""
    path = Path(directory) / FILENAME
    if not path.is_file():
        return None
    payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return payload
