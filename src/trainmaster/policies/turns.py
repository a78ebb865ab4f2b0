"""drf's failed turns as pieces of the line: a decision's waits cost what changed, not the line's length.

When a shape's turn fails (`drf.fill_by_shape`, one queue), its later jobs wait
with the free capacity their turns would have seen: one wait per stretch of
the line between two of the queue's placements. A `Piece` keeps those few
waits per shape; the plan's waits and reasons are `snapshot.Lined` maps that
look a job up in its shape's piece, build the per-job dict only when iterated,
and list the jobs whose reason may differ from the previous decision's
(`Turns.changed`): what the controller compares with what it noted.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain, filterfalse, islice
from operator import itemgetter

from trainmaster.core.states import JobState
from trainmaster.policies.pending import PendingLine, Shape, shape_of
from trainmaster.policies.snapshot import JobView, Lined, PendingIds
from trainmaster.policies.waits import Wait, render

_Key = tuple[float, str]
_ID = itemgetter(1)


@dataclass(frozen=True, slots=True)
class Piece:
    """One shape's waiting jobs: the runs of its part from `starts[m]` up to the next start wait `waits[m]`."""

    starts: list[_Key]  # the key of each run's first job, in line order (the first: the job whose turn failed)
    waits: list[Wait]  # one per run
    texts: list[str]  # the waits rendered
    part: list[_Key]  # the shape's part of the line at the decision (`PendingLine.by_shape`)

    def index(self, key: _Key) -> int | None:
        """The run of the shape's job `key` (None: placed, before the failed turn)."""
        m = bisect_right(self.starts, key) - 1
        return None if m < 0 else m


class Turns:
    """The pieces of one decision, read per job from the snapshot's views (exact after the line moved on)."""

    __slots__ = ("jobs", "never", "pieces", "stamp")

    def __init__(self, pieces: dict[Shape, Piece], jobs: Mapping[str, JobView], never: Mapping[str, str | None],
                 stamp: tuple[object, int]) -> None:
        self.pieces, self.jobs, self.never, self.stamp = pieces, jobs, never, stamp

    def _find(self, job_id: str) -> tuple[Piece, int] | None:
        view = self.jobs.get(job_id)
        if view is None or view.state is not JobState.PENDING or self.never.get(job_id):
            return None
        piece = self.pieces.get(shape_of(view.spec))
        if piece is None:
            return None
        m = piece.index((view.submit_time, job_id))
        return None if m is None else (piece, m)

    def wait(self, job_id: str) -> Wait | None:
        found = self._find(job_id)
        return None if found is None else found[0].waits[found[1]]

    def text(self, job_id: str) -> str | None:
        found = self._find(job_id)
        return None if found is None else found[0].texts[found[1]]

    def from_views(self) -> dict[str, Wait]:
        """Every waiting job's wait in line order, read from the views (the line has moved on since)."""
        order = sorted((v.submit_time, jid) for jid, v in self.jobs.items() if v.state is JobState.PENDING)
        out: dict[str, Wait] = {}
        for _, jid in order:
            wait = self.wait(jid)
            if wait is not None:
                out[jid] = wait
        return out

    def changed(self, before: Turns, joined: frozenset[str], respecced: frozenset[str]) -> dict[str, str]:
        """Every waiting job whose text may differ from `before`'s (the previous decision's, same line):
        per shape, the stretches of its part where the two pieces' texts differ (bisections, then one C-level
        pass per stretch), plus the jobs that joined the line or whose spec changed since."""
        out: dict[str, str] = {}
        for shape, now in self.pieces.items():
            was = before.pieces.get(shape)
            cuts = set(now.starts)
            if was is not None:
                cuts.update(s for s in was.starts if s > now.starts[0])
            los = sorted(cuts)
            part = now.part
            for n, lo in enumerate(los):  # the texts are constant on [lo, next cut)
                text = now.texts[bisect_right(now.starts, lo) - 1]
                m = bisect_right(was.starts, lo) - 1 if was is not None else -1
                if was is None or m < 0 or was.texts[m] != text:
                    i = bisect_left(part, lo)
                    j = bisect_left(part, los[n + 1], i) if n + 1 < len(los) else len(part)
                    if j > i:
                        out.update(dict.fromkeys(map(_ID, islice(part, i, j)), text))
        for jid in chain(joined, respecced):
            found = self.text(jid)
            if found is not None:
                out[jid] = found
        return out


def lined_waits(turns: Turns, line: PendingLine, ids: list[str], placed: list[_Key], before: Turns | None,
                pending: PendingIds) -> tuple[Lined[Wait], Lined[str]]:
    """The plan's waits and reasons over `turns` (one queue: the plan's order is the line's)."""
    version, bad = line.version, line.bad

    def build() -> dict[str, Wait]:
        if line.version != version:  # the line moved on (ids and parts changed): read the views
            return turns.from_views()
        waits = dict.fromkeys(filterfalse(bad.__contains__, ids) if bad else ids)
        for key in placed:
            del waits[key[1]]
        for piece in turns.pieces.values():  # one C-level pass per run, no copies
            part, starts = piece.part, piece.starts
            lo = bisect_left(part, starts[0])
            for m, wait in enumerate(piece.waits):
                hi = bisect_left(part, starts[m + 1], lo) if m + 1 < len(starts) else len(part)
                waits.update(dict.fromkeys(map(_ID, islice(part, lo, hi)), wait))
                lo = hi
        return waits  # type: ignore[return-value]

    waits = Lined(turns.wait, build, len(ids) - len(bad) - len(placed), turns.stamp)
    text_of = {id(w): t for piece in turns.pieces.values() for w, t in zip(piece.waits, piece.texts, strict=True)}

    def texts() -> dict[str, str]:
        full = waits.full()
        return dict(zip(full, map(text_of.__getitem__, map(id, full.values())), strict=True))

    base, changed = None, None
    if before is not None and before.stamp == (pending.origin, pending.version - 1) \
            and before.never is turns.never and pending.changed is not None:
        base, changed = before.stamp, turns.changed(before, pending.joined, pending.changed)
    return waits, Lined(turns.text, texts, waits.size, turns.stamp, base, changed)


def piece(starts: list[_Key], waits: list[Wait], part: list[_Key]) -> Piece:
    return Piece(starts, waits, [render(w) for w in waits], part)
