"""Reasons the controller notes on many waiting jobs at once, kept as shared streams until a record is read.

When the head of a strict line starts, every job behind it gets a new reason
("waiting behind <new head>"). Appending that to thousands of decision logs is
a Python step per job per decision; instead the jobs that all move from one
reason to the next follow one `Stream`, a log the decision appends to once. A
job's record renders its part of the stream into its own log when read
(`JobRecord.settle`), or when it leaves the stream for a reason of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from operator import is_, is_not
from typing import Protocol


class Said(dict[str, str]):
    """Job id -> the reason a decision last noted on its record, while that is still its latest note; with
    the ids dropped since the controller last took them (`take_dropped`): a record noted from anywhere
    else. A decision whose plan lists the jobs whose reasons changed (`snapshot.Lined`) checks only those
    and the dropped ones, instead of every waiting job."""

    __slots__ = ("dropped",)

    def __init__(self) -> None:
        super().__init__()
        self.dropped: set[str] = set()

    def drop(self, key: str) -> None:
        """Forget `key`'s entry and journal it: a note from outside a decision, or a job leaving the line or
        joining a shared stream, so the next decision checks its reason again."""
        self.dropped.add(key)
        self.pop(key, None)

    def take_dropped(self) -> set[str]:
        dropped, self.dropped = self.dropped, set()
        return dropped


class Stream:
    """A log of reasons shared by the jobs following it (`count` of them): each got every entry from its start."""

    __slots__ = ("count", "log")

    def __init__(self) -> None:
        self.log: list[tuple[float, str]] = []
        self.count = 0


class Settles(Protocol):
    """What `NoteStreams.note` needs of a job record: render its stream into its own log."""

    def settle(self) -> None: ...


class NoteStreams:
    """Which stream each job follows, from which entry; the controller's lazily noted reasons.

    Invariant: a job follows a stream only while its latest note is that stream's
    last entry (noted by a decision); a note from anywhere else settles it first.
    """

    __slots__ = ("left", "of", "start", "tail", "tips")

    def __init__(self) -> None:
        self.of: dict[str, Stream] = {}  # job id -> the stream it follows
        self.start: dict[str, tuple[int, float]] = {}  # job id -> (its first entry's index, when it joined)
        self.tips: dict[str, Stream] = {}  # reason -> a stream whose last entry is that reason (joinable)
        # The stream of the jobs behind the head of a strict line (`snapshot.Tail`): never joinable through
        # `tips`, joined only by `follow_tail`; `left`: the jobs that stopped following it since last read.
        self.tail: Stream | None = None
        self.left: list[str] = []

    def why(self, job_id: str) -> str | None:
        """The job's latest reason if it follows a stream."""
        stream = self.of.get(job_id)
        return None if stream is None else stream.log[-1][1]

    def take(self, job_id: str, keep: int) -> list[tuple[float, str]]:
        """Stop `job_id` following its stream; its entries since it joined (the last `keep`), oldest first."""
        stream = self.of.pop(job_id, None)
        if stream is None:
            return []
        index, since = self.start.pop(job_id)
        stream.count -= 1
        if stream is self.tail:
            self.left.append(job_id)
        log = stream.log
        entries = log[max(index, len(log) - keep):]
        if entries and len(log) - index <= keep:  # its first entry: when it joined (a stream's entry may be older)
            entries[0] = (since, entries[0][1])
        return entries

    def note(self, moves: Mapping[tuple[Stream | None, str], list[str]], records: Mapping[str, Settles],
             now: float) -> None:
        """Each group of jobs moves from its stream (None: none) to the reason of its key.

        A stream all of whose jobs move continues with its largest group's reason
        (one append); every other job is settled into its own log and joins a
        stream whose last entry is its new reason (one made if none).
        """
        moving: dict[Stream, int] = {}
        for (stream, _), ids in moves.items():
            if stream is not None:
                moving[stream] = moving.get(stream, 0) + len(ids)
        going: dict[Stream, str] = {}  # stream -> the reason it continues with
        for (stream, reason), ids in moves.items():
            if stream is not None and moving[stream] == stream.count:
                other = going.get(stream)
                if other is None or len(ids) > len(moves[stream, other]):
                    going[stream] = reason
        joining: list[tuple[str, list[str]]] = []
        for (stream, reason), ids in moves.items():
            if stream is None or going.get(stream) != reason:
                if stream is not None:
                    for jid in ids:
                        records[jid].settle()
                joining.append((reason, ids))
        tips = self.tips
        for stream, reason in going.items():
            last = stream.log[-1][1]
            if tips.get(last) is stream:
                del tips[last]
            stream.log.append((now, reason))
            tips[reason] = stream
        for reason, ids in joining:
            stream = tips.get(reason)
            if stream is None:
                stream = tips[reason] = Stream()
                stream.log.append((now, reason))
            self.of.update(dict.fromkeys(ids, stream))
            self.start.update(dict.fromkeys(ids, (len(stream.log) - 1, now)))
            stream.count += len(ids)
        if len(tips) > 64:  # streams nobody follows any more
            self.tips = {reason: s for reason, s in tips.items() if s.count}

    def follow_tail(self, reason: str, joining: Iterable[str], records: Mapping[str, Settles], now: float,
                    *, fresh: bool = False) -> None:
        """The tail stream moves on to `reason` (one entry, none if it is its last already) and `joining` follow
        it from now (each settled out of the stream it followed first). `fresh`: a new tail stream, for
        `joining` alone. A joining job whose latest note is `reason` already renders no second entry
        (`JobRecord.settle` skips repeats), as a decision would not note an unchanged reason."""
        stream = self.tail
        if stream is None or fresh:
            stream = self.tail = Stream()
        if not stream.log or stream.log[-1][1] != reason:
            stream.log.append((now, reason))
        of = self.of
        joining = list(joining)
        for jid in joining:
            if jid in of:
                records[jid].settle()
        of.update(dict.fromkeys(joining, stream))
        self.start.update(dict.fromkeys(joining, (len(stream.log) - 1, now)))
        stream.count += len(joining)
        self.left = []

    def group(self, new: dict[str, str]) -> dict[tuple[Stream | None, str], list[str]]:
        """Job id -> new reason, grouped by (the stream the job follows, new reason).

        C-level passes per reason many jobs share (usually one: "waiting behind <head>") and per stream
        among them; a Python step only for the jobs whose reason few others share.
        """
        get = self.of.get
        moves: dict[tuple[Stream | None, str], list[str]] = {}
        if len(new) >= 2 * _SHARED:
            # Usually one reason covers most of the line, its tail included: take it from the last job
            # rather than counting every job's reason; only the others are counted below.
            last = next(reversed(new.values()))
            ids = list(compress(new, map(is_, new.values(), repeat(last))))
            if len(ids) >= max(_SHARED, len(new) // 8):
                self._by_stream(moves, ids, last)
                new = dict(compress(new.items(), map(is_not, new.values(), repeat(last))))
        counts = Counter(new.values())
        floor = max(_SHARED, len(new) // 8)
        shared = [reason for reason, n in counts.items() if n >= floor]
        for reason in shared:
            ids = list(compress(new, map(is_, new.values(), repeat(reason))))  # (one rendered text: one object)
            if len(ids) != counts[reason]:  # equal texts that are not one object
                ids = list(compress(new, map(reason.__eq__, new.values())))
            self._by_stream(moves, ids, reason)
        if len(shared) < len(counts):
            few = counts.keys() - shared
            for jid, reason in compress(new.items(), map(few.__contains__, new.values())):
                key = (get(jid), reason)
                group = moves.get(key)
                if group is None:
                    moves[key] = [jid]
                else:
                    group.append(jid)
        return moves

    def _by_stream(self, moves: dict[tuple[Stream | None, str], list[str]], ids: list[str], reason: str) -> None:
        """Add jobs moving to one reason to `moves`, split by the stream each follows."""
        get = self.of.get
        streams = set(map(get, ids))
        if len(streams) == 1:
            stream = streams.pop()
            group = moves.get((stream, reason))
            if group is None:
                moves[stream, reason] = ids
            else:  # (an equal text that is another object, grouped before)
                group.extend(ids)
            return
        # One Python pass: faster than a C-level pass per stream from two streams up (10,000 ids: 1.0 vs
        # 1.3 ms at 2 streams, 2.0 vs 3.6 at 8, 1.0 vs 20 at 32; deep in a long run ~1,000 streams per move).
        parts: dict[Stream | None, list[str]] = {stream: [] for stream in streams}
        for jid, stream in zip(ids, map(get, ids), strict=True):
            parts[stream].append(jid)
        for stream, part in parts.items():
            group = moves.get((stream, reason))
            if group is None:
                moves[stream, reason] = part
            else:
                group.extend(part)


_SHARED = 16  # jobs sharing one new reason for it to be grouped by C-level passes
