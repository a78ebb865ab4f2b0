"""Read task logs in bounded memory: whole, the last N lines, or followed as they grow, wherever they are.

A task's log is `<role>-<index>.log` (newest part) and, once the engine rotated
it past its size cap, `<role>-<index>.log.1` (the previous part, copy-truncate).
A full read serves `.log.1` then `.log`; `tail` finds where the last N lines
start by reading backwards in blocks, then streams forward from there; follow
polls the `.log` and, when it was truncated by a rotation, first finishes what
was left unread in `.log.1`. Nothing holds more than a block and one line
(capped at MAX_LINE) in memory, however large the files.

The files are reached through `LogFiles`: `LocalFiles` reads a job folder on
this machine (the local engine); the Ray engine reads each task's files on
the node that ran it, through Ray. The logic above is written once, here.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

BLOCK = 64 * 1024
MAX_LINE = 1 << 20  # a longer line is cut into pieces of this size


class LogFiles(Protocol):
    """One job's log files, by name (`worker-0.log`, `worker-0.log.1`), wherever they are kept."""

    def tasks(self) -> list[str]:
        """Tasks with a log (or only a rotated part of one), sorted."""
        ...

    def size(self, name: str) -> int | None:
        """The file's size now; None when there is no such file."""
        ...

    def read(self, name: str, offset: int, until: int | None = None) -> Iterator[bytes]:
        """Blocks of the file from `offset` to `until` (default: its end when opened); nothing if it is gone."""
        ...


@dataclass(frozen=True)
class LocalFiles:
    """A job's log files in a folder of this machine."""

    job_dir: Path

    def tasks(self) -> list[str]:
        return names_of(p.name for p in self.job_dir.glob("*.log*"))

    def size(self, name: str) -> int | None:
        try:
            return (self.job_dir / name).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read(self, name: str, offset: int, until: int | None = None) -> Iterator[bytes]:
        return read_from(self.job_dir / name, offset, until)


def names_of(files: Iterator[str] | list[str]) -> list[str]:
    """Task names from file names (`worker-0.log`, `worker-0.log.1`; anything else is skipped), sorted."""
    return sorted({f.removesuffix(".1").removesuffix(".log") for f in files if f.endswith((".log", ".log.1"))})


def log_parts(files: LogFiles, task: str) -> list[tuple[str, int]]:
    """The task's log files with their sizes, oldest first (only those that exist)."""
    sized = ((name, files.size(name)) for name in (f"{task}.log.1", f"{task}.log"))
    return [(name, size) for name, size in sized if size is not None]


def tail_start(files: LogFiles, parts: list[tuple[str, int]], lines: int) -> list[tuple[str, int]]:
    """Where the last `lines` lines of the concatenated parts begin: (file, offset) pairs to read to their end.

    Reads backwards one block at a time; a final newline does not count as a line.
    """
    if lines <= 0:
        return [(name, size) for name, size in parts[-1:]]
    seen = 0
    trailing = True
    for k in range(len(parts) - 1, -1, -1):
        name, pos = parts[k]
        while pos > 0:
            start = max(0, pos - BLOCK)
            block = b"".join(files.read(name, start, pos))
            if len(block) < pos - start:  # the file shrank under us (rotated): take it from its start
                return [(name, 0)] + [(p, 0) for p, _ in parts[k + 1:]]
            if trailing:
                block = block.removesuffix(b"\n")
                trailing = False
            end = len(block)
            while (i := block.rfind(b"\n", 0, end)) >= 0:
                seen += 1
                if seen == lines:
                    return [(name, start + i + 1)] + [(p, 0) for p, _ in parts[k + 1:]]
                end = i
            pos = start
    return [(name, 0) for name, _ in parts]


def read_from(path: Path, offset: int, until: int | None = None) -> Iterator[bytes]:
    """Blocks of `path` from `offset` to `until` (default: its end when opened)."""
    try:
        f = path.open("rb")
    except (FileNotFoundError, NotADirectoryError):
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
    files: LogFiles
    lines: _Lines
    pending: list[tuple[str, int]]
    offset: int = 0

    @property
    def current(self) -> str:
        return f"{self.task}.log"

    def drain(self) -> Iterator[str]:
        """Send what was pending, then anything new in `.log` (after a rotation: the rest of `.log.1` first)."""
        pending, self.pending = self.pending, []
        for name, start in pending:
            at = start
            for block in self.files.read(name, start):
                at += len(block)
                yield from self.lines.feed(block)
            if name == self.current:
                self.offset = at
        size = self.files.size(self.current)
        if size is None:
            return
        if size < self.offset:  # rotated: the part we had not read yet was copied to .log.1
            for block in self.files.read(f"{self.task}.log.1", self.offset):
                yield from self.lines.feed(block)
            self.offset = 0
        for block in self.files.read(self.current, self.offset, size):
            self.offset += len(block)
            yield from self.lines.feed(block)


def stream_logs(files: LogFiles, task: str | None, *, tail: int | None, follow: bool,
                done: Callable[[], bool], poll: float) -> Iterator[str]:
    """Lines of one task's log (or every task's, each line prefixed `[task] `), oldest first, in chunks of whole
    lines (a block at a time).

    `tail=N` starts each task at its last N lines. Following, poll every `poll`
    seconds and stop once `done()` held before a read that found nothing new.
    """
    followers: dict[str, _Follower] = {}

    def add(name: str) -> None:
        parts = log_parts(files, name)
        start = tail_start(files, parts, tail) if tail is not None else [(p, 0) for p, _ in parts]
        followers[name] = _Follower(name, files, _Lines("" if task else f"[{name}] "), start)

    while True:
        finished = follow and done()  # decided before reading, so the last lines are not lost
        for name in [task] if task else files.tasks():
            if name not in followers:
                add(name)
            yield from followers[name].drain()
        if not follow or finished:
            for follower in followers.values():
                yield from follower.lines.flush()
            return
        time.sleep(poll)
