"""The immutable view a policy decides on, and the plan it returns."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from itertools import islice
from types import MappingProxyType
from typing import Protocol, TypeVar, overload

from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.queue import QueueSpec
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.models.book import JobModel
from trainmaster.policies.waits import Wait


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the policy sees it at `Snapshot.now`. Never the simulator's ground truth."""

    id: str
    spec: JobSpec
    state: JobState
    submit_time: float
    allocation: Allocation = EMPTY
    first_start: float | None = None
    running_since: float | None = None  # last (re)start of the current allocation
    restarts: int = 0  # restarts after failures (a task crashed, a node was lost, the daemon restarted)
    resizes: int = 0
    preemptions: int = 0
    attained: float = 0.0  # GPU-seconds of service so far (Tiresias' attained service)
    runtime: float = 0.0  # seconds spent holding resources so far
    step: int = 0  # last reported step
    loss: float | None = None  # last reported loss
    steps_per_s: float | None = None  # last reported speed
    last_checkpoint: float | None = None  # time of the last checkpoint (or of the restart)
    spent: float = 0.0  # dollars the job has paid so far (the controller's cost meter, `core.cost`)

    @property
    def active(self) -> bool:
        state = self.state  # JobState.active, inlined: read for every job in every decision
        return state is JobState.RUNNING or state is JobState.STARTING

    @property
    def pending(self) -> bool:
        return self.state is JobState.PENDING

    def count(self, role: Role) -> int:
        return self.allocation.count(role)

    @property
    def gpus(self) -> int:
        return self.allocation.gpus(self.spec)


class PendingIds(Sequence[str]):
    """`Snapshot.pending_ids` as the controller hands them: with the ids that joined or left since its
    previous snapshot, so an index a policy keeps of the previous ids (`pending.PendingLine`) can follow
    what changed instead of comparing every id. The ids come from a frozen source, read (once) on first
    use: a policy that follows the journal never pays for them."""

    __slots__ = ("_ids", "_source", "changed", "joined", "left", "origin", "version")

    def __init__(self, ids: Iterable[str], origin: object, version: int, joined: frozenset[str],
                 left: frozenset[str], changed: frozenset[str] | None = None) -> None:
        """`ids` must not change afterwards (a tuple, or a frozen mapping's keys)."""
        self.origin = origin  # whose snapshots these are (the versions count per origin)
        self.version = version  # this snapshot's number
        self.joined = joined  # pending now, not (or maybe not) in snapshot `version - 1`
        self.left = left  # not pending now, pending (or maybe not) in snapshot `version - 1`
        self.changed = changed  # jobs whose view (spec...) may differ from snapshot `version - 1`'s (None: any)
        self._source: Iterable[str] | None = ids
        self._ids: tuple[str, ...] | None = None

    def _all(self) -> tuple[str, ...]:
        if self._ids is None:
            assert self._source is not None
            self._ids, self._source = tuple(self._source), None
        return self._ids

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self._all()[index]

    def __len__(self) -> int:
        source = self._source
        return len(source) if isinstance(source, Sized) else len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __contains__(self, job_id: object) -> bool:
        source = self._source
        return job_id in source if isinstance(source, Mapping) else job_id in self._all()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PendingIds):
            other = other._all()
        return self._all() == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"PendingIds({self._all()!r})"


class Stamped(Protocol):
    """Something whose `version` changes whenever it changes (`pending.PendingLine`)."""

    version: int


_V = TypeVar("_V")


class Tail:
    """The jobs that wait behind one head of a strict line, as one segment: every pending job after the head
    in (submit time, id) order that can fit some day. Read per job on demand, never written per job, so a
    decision over a long line need not touch each waiting job (`Behind`, the controller's `cycle`).

    Frozen with the decision's snapshot: membership reads the snapshot's views and never-fits verdicts
    (a verdict, once made for a cluster, never changes).
    """

    __slots__ = ("_ids", "_line", "_line_ids", "_start", "_version", "head", "jobs", "key", "never", "size")

    def __init__(self, head: str, key: tuple[float, str], jobs: Mapping[str, JobView],
                 never: Mapping[str, str | None], size: int, line: tuple[list[str], int, Stamped]) -> None:
        """`line`: (the line's ids, the position after the head, the line) while the line has not changed."""
        self.head, self.key, self.jobs, self.never, self.size = head, key, jobs, never, size
        self._ids: list[str] | None = None
        ids, self._start, self._line = line
        self._line_ids: list[str] = ids
        self._version = self._line.version

    def __contains__(self, job_id: object) -> bool:
        view = self.jobs.get(job_id) if isinstance(job_id, str) else None
        return (view is not None and view.state is JobState.PENDING and (view.submit_time, view.id) > self.key
                and not self.never.get(view.id))

    def members(self) -> list[str]:
        """The ids in line order (built on first read: from the line while it is unchanged, else from the views)."""
        if self._ids is None:
            if self._line.version == self._version:
                never, ids = self.never, self._line_ids
                rest = islice(ids, self._start, None)
                self._ids = list(rest) if len(ids) - self._start == self.size else [j for j in rest if not never.get(j)]
            else:
                self._ids = [jid for _, jid in sorted((v.submit_time, jid) for jid, v in self.jobs.items()
                                                      if jid in self)]
        return self._ids

    def lined(self, own: Mapping[str, _V], after: int, value: Callable[[str], _V],
              values: Callable[[list[str]], Iterable[_V]], stamp: tuple[object, int] | None = None,
              base: tuple[object, int] | None = None, changed: dict[str, _V] | None = None) -> Lined[_V]:
        """A plan's waits or reasons: `own`'s entries with every member's between them, its last `after` own
        entries after the members, each member with a value of its own (`value`: one member's; `values`: a
        list's, in order), looked up per job on demand (optimus' misfit tail: one wait per minimum)."""
        def locate(job_id: str) -> _V | None:
            got = own.get(job_id)
            return value(job_id) if got is None and job_id in self else got

        def build() -> dict[str, _V]:
            items = list(own.items())
            cut = len(items) - after
            members = self.members()
            out = dict(items[:cut])
            out.update(zip(members, values(members), strict=True))
            out.update(items[cut:])
            return out

        return Lined(locate, build, len(own) + self.size, stamp, base, changed)


class Behind(Mapping[str, _V]):
    """A plan's waits or reasons: the jobs' own entries, then every job of a `Tail` with one shared value."""

    __slots__ = ("own", "tail", "value")

    def __init__(self, own: dict[str, _V], tail: Tail, value: _V) -> None:
        self.own, self.tail, self.value = own, tail, value

    def __getitem__(self, job_id: str) -> _V:
        own = self.own.get(job_id, _MISSING)
        if own is not _MISSING:
            return own  # type: ignore[return-value]
        if job_id in self.tail:
            return self.value
        raise KeyError(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.own or job_id in self.tail

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        yield from self.tail.members()

    def __len__(self) -> int:
        return len(self.own) + self.tail.size

    def __repr__(self) -> str:
        return f"Behind({dict(self)!r})"


_MISSING = object()


class Lined(Mapping[str, _V]):
    """A plan's waits or reasons where many waiting jobs share a few values by where they stand in the line
    (drf's failed turns, per shape): looked up per job on demand, the whole dict built only when iterated.

    `changed`, when not None, holds every job whose value may differ from the same policy's plan for the
    snapshot `base` (its previous one): the controller then compares only those with what it noted.
    """

    __slots__ = ("_build", "_full", "_locate", "base", "changed", "size", "stamp")

    def __init__(self, locate: Callable[[str], _V | None], build: Callable[[], dict[str, _V]], size: int,
                 stamp: tuple[object, int] | None = None, base: tuple[object, int] | None = None,
                 changed: dict[str, _V] | None = None) -> None:
        """`locate`: a job's value (None: not a member); `build`: every entry in plan order (called once)."""
        self._locate, self._build, self.size = locate, build, size
        self._full: dict[str, _V] | None = None
        self.stamp, self.base, self.changed = stamp, base, changed  # (origin, version) of the snapshots

    def full(self) -> dict[str, _V]:
        if self._full is None:
            self._full = self._build()
        return self._full

    def __getitem__(self, job_id: str) -> _V:
        value = self._full.get(job_id) if self._full is not None else self._locate(job_id)
        if value is None:
            raise KeyError(job_id)
        return value

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self.get(job_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.full())

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Lined({self.full()!r})"


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may read: nodes, live jobs, free capacity, models, `now`."""

    now: float
    cluster: Cluster
    jobs: Mapping[str, JobView]  # pending and active jobs only
    free: Mapping[str, Resources]  # capacity minus what active jobs hold, per node
    models: Mapping[str, JobModel] = field(default_factory=lambda: MappingProxyType({}))
    queues: Mapping[str, QueueSpec] = field(default_factory=lambda: MappingProxyType({}))
    # Kept incrementally by the controller so a decision need not scan every job (None: derive them).
    free_total: Resources | None = None  # sum of `free`
    held: Mapping[str, Allocation] | None = None  # the allocation of every active job
    pending_ids: Sequence[str] | None = None  # ids of the pending jobs, in `jobs` order


@dataclass(frozen=True)
class Plan:
    """What the policy wants: the allocation of every job that should hold resources.

    A live job absent from `allocations` should not run (stays pending, or is
    preempted). `waits` says why each job it does not run waits (typed), `reasons`
    the text people read, per job (rendered from the wait, or a note on a placed
    job); `rejected` lists jobs that can never run.
    """

    allocations: Mapping[str, Allocation]
    reasons: Mapping[str, str] = field(default_factory=dict)
    waits: Mapping[str, Wait] = field(default_factory=dict)
    rejected: Mapping[str, str] = field(default_factory=dict)
    eta: Mapping[str, float] = field(default_factory=dict)  # predicted start of pending jobs
    wake_after: float | None = None  # decide again after this many seconds even without events (None: `interval`)
    batch: Mapping[str, int] = field(default_factory=dict)  # adaptive jobs: the global batch to (re)start with
    rebatch: Mapping[str, int] = field(default_factory=dict)  # running adaptive jobs kept where they are: new batch
    # phase -> seconds it took (server logs); not part of what was decided, so plans compare without it
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)


def forget_ended(kept: dict[str, _V], jobs: Mapping[str, object]) -> None:
    """Drop what a policy keeps across decisions for jobs no longer in the snapshot, once they could be most of
    it: the memo stays within a small multiple of the live jobs at one C-level length check per decision."""
    if len(kept) > 2 * len(jobs) + 64:
        for jid in kept.keys() - jobs.keys():
            del kept[jid]


class Policy(Protocol):
    """The one signature every scheduling policy has."""

    name: str
    interval: float | None  # re-decide at least this often while jobs are live (None: on events only)
    uses_models: bool  # True: the controller fits speed and convergence models online from reports
    # True: a decision looks up only the jobs that changed and a few more, so the controller may hand it a
    # frozen book of the jobs instead of a copy of every one (`Cycle.reads_few_jobs`, `controller.views.Frozen`)
    reads_few_jobs: bool

    def decide(self, snapshot: Snapshot) -> Plan: ...
