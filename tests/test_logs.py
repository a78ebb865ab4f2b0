"""Log serving in bounded memory: rotated parts in order, `tail` across parts, long lines cut, rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmaster.engines import task_logs as logs
from trainmaster.engines.task_logs import LocalFiles, stream_logs, tail_start


def read(job_dir: Path, task: str | None = "worker-0", tail: int | None = None) -> list[str]:
    return "".join(stream_logs(LocalFiles(job_dir), task, tail=tail, follow=False, done=lambda: True,
                               poll=0.0)).splitlines()


@pytest.fixture
def rotated(tmp_path: Path) -> Path:
    (tmp_path / "worker-0.log.1").write_text("".join(f"old {i}\n" for i in range(5)))
    (tmp_path / "worker-0.log").write_text("".join(f"new {i}\n" for i in range(3)))
    (tmp_path / "worker-1.log").write_text("other\nlast without newline")
    return tmp_path


def test_full_read_serves_the_rotated_part_first(rotated: Path) -> None:
    assert read(rotated) == [f"old {i}" for i in range(5)] + [f"new {i}" for i in range(3)]
    everything = read(rotated, task=None)
    assert everything[0] == "[worker-0] old 0" and everything[-2:] == ["[worker-1] other",
                                                                        "[worker-1] last without newline"]


@pytest.mark.parametrize(("n", "expected"), [
    (0, []), (1, ["new 2"]), (3, ["new 0", "new 1", "new 2"]), (4, ["old 4", "new 0", "new 1", "new 2"]),
    (100, [f"old {i}" for i in range(5)] + [f"new {i}" for i in range(3)]),
])
def test_tail_counts_lines_across_both_parts(rotated: Path, n: int, expected: list[str]) -> None:
    assert read(rotated, tail=n) == expected


def test_tail_reads_backwards_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "BLOCK", 7)  # many blocks, lines straddling them
    path = tmp_path / "worker-0.log"
    path.write_text("".join(f"line {i}\n" for i in range(50)))
    assert read(tmp_path, tail=3) == ["line 47", "line 48", "line 49"]
    start = tail_start(LocalFiles(tmp_path), [(path.name, path.stat().st_size)], 2)
    assert start == [(path.name, path.stat().st_size - len("line 48\nline 49\n"))]
    path.write_text("no newline at all")
    assert read(tmp_path, tail=5) == ["no newline at all"]


def test_a_line_longer_than_the_cap_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "MAX_LINE", 10)
    monkeypatch.setattr(logs, "BLOCK", 4)
    (tmp_path / "worker-0.log").write_text("x" * 25 + "\nend\n")
    assert read(tmp_path) == ["x" * 10, "x" * 10, "x" * 5, "end"]


def test_following_across_a_rotation_loses_nothing_unread(tmp_path: Path) -> None:
    log, old = tmp_path / "worker-0.log", tmp_path / "worker-0.log.1"
    log.write_text("a\nb\n")
    state = {"done": False}
    lines = stream_logs(LocalFiles(tmp_path), "worker-0", tail=None, follow=True, done=lambda: state["done"], poll=0.0)
    assert next(lines) == "a\nb\n"
    with log.open("a") as f:
        f.write("c\n")
    old.write_bytes(log.read_bytes())  # the engine's copy-truncate
    log.write_text("d\n")
    state["done"] = True
    assert "".join(lines) == "c\nd\n"
