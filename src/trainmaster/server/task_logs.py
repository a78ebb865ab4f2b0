"""Serve task logs in bounded memory: whole, the last N lines, or followed as they grow.

A task's log is `<role>-<index>.log` (newest part) and, once the engine rotated
it past its size cap, `<role>-<index>.log.1` (the previous part, copy-truncate).
A full read serves `.log.1` then `.log`; `tail` finds where the last N lines
start by reading backwards in blocks, then streams forward from there; follow
polls the `.log` and, when it was truncated by a rotation, first finishes what
was left unread in `.log.1`. Nothing holds more than a block and one line
(capped at MAX_LINE) in memory, however large the files.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 64 * 1024
MAX_LINE = 1 << 20  # a longer line is cut into pieces of this size
TASK_LOG = "*.log"


def log_parts(job_dir: Path, task: str) -> list[Path]:
    """The task's log files, oldest first (only those that exist)."""
    return [p for p in (job_dir / f"{task}.log.1", job_dir / f"{task}.log") if p.is_file()]


def task_names(job_dir: Path) -> list[str]:
    """Tasks with a log (or only a rotated part of one), sorted."""
    names = {p.name.removesuffix(".1").removesuffix(".log") for p in job_dir.glob("*.log*")
             if p.name.endswith((".log", ".log.1"))}
    return sorted(names)


def tail_start(parts: list[Path], lines: int) -> list[tuple[Path, int]]:
    """Where the last `lines` lines of the concatenated parts begin: (file, offset) pairs to read to their end.

    Reads backwards one block at a time; a final newline does not count as a line.
    """
    sizes = [(p, p.stat().st_size) for p in parts]
    if lines <= 0:
        return [(p, size) for p, size in sizes[-1:]]
    seen = 0
    trailing = True
    for k in range(len(sizes) - 1, -1, -1):
        path, pos = sizes[k]
        with path.open("rb") as f:
            while pos > 0:
                start = max(0, pos - BLOCK)
                f.seek(start)
                block = f.read(pos - start)
                if trailing:
                    block = block.removesuffix(b"\n")
                    trailing = False
                end = len(block)
                while (i := block.rfind(b"\n", 0, end)) >= 0:
                    seen += 1
                    if seen == lines:
                        return [(path, start + i + 1)] + [(p, 0) for p, _ in sizes[k + 1:]]
                    end = i
                pos = start
    return [(p, 0) for p, _ in sizes]


def read_from(path: Path, offset: int, until: int | None = None) -> Iterator[bytes]:
    """Blocks of `path` from `offset` to `until` (default: its end when opened)."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, 2) if until is None else until
        f.seek(offset)
        while offset < end:
            block = f.read(min(BLOCK, end - offset))
            if not block:
                return
            offset += len(block)
            yield block


@dataclass
class _Lines:
    """Bytes in, whole lines out (each with the prefix), one string per block; at most one partial line held."""

    prefix: str
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    partial: str = ""

    def _lines(self, text: str) -> str:
        return f"{self.prefix}{text[:-1].replace(chr(10), chr(10) + self.prefix)}\n" if self.prefix else text

    def feed(self, data: bytes) -> Iterator[str]:
        text = self.partial + self.decoder.decode(data)
        cut = text.rfind("\n") + 1
        self.partial = text[cut:]
        if cut:
            yield self._lines(text[:cut])  # a block's worth at once: one write per block, not per line
        while len(self.partial) > MAX_LINE:
            yield f"{self.prefix}{self.partial[:MAX_LINE]}\n"
            self.partial = self.partial[MAX_LINE:]

    def flush(self) -> Iterator[str]:
        rest, self.partial = self.partial + self.decoder.decode(b"", final=True), ""
        if rest:
            yield f"{self.prefix}{rest}\n"


@dataclass
class _Follower:
    """One task's log being read: what is left to send now, then the `.log`'s offset to poll from."""

    task: str
    job_dir: Path
    lines: _Lines
    pending: list[tuple[Path, int]]
    offset: int = 0

    @property
    def current(self) -> Path:
        return self.job_dir / f"{self.task}.log"

    def drain(self) -> Iterator[str]:
        """Send what was pending, then anything new in `.log` (after a rotation: the rest of `.log.1` first)."""
        pending, self.pending = self.pending, []
        for path, start in pending:
            at = start
            for block in read_from(path, start):
                at += len(block)
                yield from self.lines.feed(block)
            if path == self.current:
                self.offset = at
        try:
            size = self.current.stat().st_size
        except FileNotFoundError:
            return
        if size < self.offset:  # rotated: the part we had not read yet was copied to .log.1
            rotated = self.job_dir / f"{self.task}.log.1"
            for block in read_from(rotated, self.offset):
                yield from self.lines.feed(block)
            self.offset = 0
        for block in read_from(self.current, self.offset, size):
            self.offset += len(block)
            yield from self.lines.feed(block)


def stream_logs(job_dir: Path, task: str | None, *, tail: int | None, follow: bool,
                done: Callable[[], bool], poll: float) -> Iterator[str]:
    """Lines of one task's log (or every task's, each line prefixed `[task] `), oldest first, in chunks of whole
    lines (a block at a time).

    `tail=N` starts each task at its last N lines. Following, poll every `poll`
    seconds and stop once `done()` held before a read that found nothing new.
    """
    followers: dict[str, _Follower] = {}

    def add(name: str) -> None:
        parts = log_parts(job_dir, name)
        start = tail_start(parts, tail) if tail is not None else [(p, 0) for p in parts]
        followers[name] = _Follower(name, job_dir, _Lines("" if task else f"[{name}] "), start)

    while True:
        finished = follow and done()  # decided before reading, so the last lines are not lost
        for name in [task] if task else task_names(job_dir):
            if name not in followers:
                add(name)
            yield from followers[name].drain()
        if not follow or finished:
            for follower in followers.values():
                yield from follower.lines.flush()
            return
        time.sleep(poll)
