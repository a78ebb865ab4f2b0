"""Phase 4 for queue-aware presets: place whole gangs in fair-share order, within quotas.

Across queues the next job comes from the queue with the lowest weighted
dominant share counting that job as placed (DRF by weight with progressive
filling, hierarchical: parents compared first, queue priority before share).
Within a queue services come first, then priority, then submit time: DRF by
job, since a pending job holds nothing (idle capacity then goes to the least
fulfilled elastic job, phase 5). Running jobs are placed first (shrinks included), then
pending jobs. `strict`: the first pending job that does not fit for capacity
becomes the head and every later pending job waits behind it (reservation and
backfill in phase 5 may still start some); otherwise anything that fits starts
(greedy skipping).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from itertools import compress, count, repeat
from operator import and_, attrgetter, is_, itemgetter, not_

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.cycle import PlaceHook
from trainmaster.policies.queuebook import QueueBook
from trainmaster.policies.queues import try_place
from trainmaster.policies.snapshot import JobView, Snapshot, forget_ended
from trainmaster.policies.waits import Wait, WaitKind
from trainmaster.policies.workspace import Workspace, demand, room_wait

_ID, _STATE = attrgetter("id"), attrgetter("state")
_HELD, _WANT = itemgetter(0), itemgetter(1)  # of a `FairPlace.equal` entry
_NOT_SEEN = (object(), object())  # (a missing entry: no allocation or size is either object)


def fair_sequence(book: QueueBook, jobs: list[JobView]) -> list[list[JobView]]:
    """Pending jobs grouped per queue, each list in within-queue order."""
    groups: dict[str, list[JobView]] = {}
    for job in jobs:
        groups.setdefault(book.queue_of(job), []).append(job)
    return list(groups.values())


def fair_order(book: QueueBook | None, pending: list[JobView]) -> Iterator[JobView]:
    """The pending jobs in fair-share order: each next job from the queue whose `fair_key` is lowest as the
    book stands when it is asked for (the caller places the previous job first). Without queue definitions
    (no book: None) every job is in the implicit queue: the given order, a plain list iterator (no generator
    frame resumed per job: a busy line's 10,000)."""
    if book is None or not book.queues:
        return iter(pending)
    return _by_fair_key(book, pending)


def _by_fair_key(book: QueueBook, pending: list[JobView]) -> Iterator[JobView]:
    """`fair_order` under queue definitions (a generator: the book is read as each job is asked for)."""
    groups = [deque(g) for g in fair_sequence(book, pending)]
    while groups:
        if len(groups) > 1:
            groups.sort(key=lambda g: book.fair_key(g[0]))
        yield groups[0].popleft()
        if not groups[0]:
            groups.pop(0)


class FairPlace:
    """The place hook (module doc). `shortcuts=False`: every pending job takes the full per-job path (the
    reference the one-role shortcut below must plan like).

    `skip_kept`: the running-jobs pass (a step per live job) runs only when some holder's size differs from
    what it holds. Whether they are equal reads the allocation (immutable) and the size dict alone, and the
    size hooks replace a size, never edit one in place (`trainmaster.OnlyWithServices`), so a holder found
    equal is skipped while both are the objects it was found equal with (`equal`, declared state: kept
    sizes and unchanged holders are most of them). When no holder differs the pass would do nothing. False:
    the pass over every job at every decision (the reference).
    """

    skip_kept = True

    def __init__(self, strict: bool, shortcuts: bool = True) -> None:
        self.strict, self.shortcuts = strict, shortcuts
        self.equal: dict[str, tuple[Allocation, Mapping[Role, int]]] = {}  # job -> (held, size) found equal

    def _any_resize(self, snap: Snapshot, allocations: Mapping[str, Allocation],
                    sizes: Mapping[str, Mapping[Role, int]]) -> bool:
        """Whether some holder with a size holds other counts than its size (what the running pass acts on).

        The holders found equal with these very objects are passed over in C-level passes (most of them at
        most decisions); a Python step only for the others, in the allocations' order."""
        equal = self.equal
        forget_ended(equal, snap.jobs)
        ids, helds = list(allocations), list(allocations.values())
        wants = list(map(sizes.get, ids))
        got = list(map(equal.get, ids, repeat(_NOT_SEEN)))
        same = map(and_, map(is_, map(_HELD, got), helds), map(is_, map(_WANT, got), wants))
        for k in compress(count(), map(not_, same)):
            want, held = wants[k], helds[k]
            if want is None or not held:
                continue
            if not all(held.count(r) == n for r, n in want.items()):
                return True
            equal[ids[k]] = (held, want)
        return False

    def __call__(self, snap: Snapshot, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]],
                 ws: Workspace) -> list[JobView]:
        strict, shortcuts = self.strict, self.shortcuts
        book = ws.book if ws.queued else None  # (without queue definitions: no quota, no share to read)
        blocked: list[JobView] = []
        allocations = ws.allocations
        # Running jobs first: keep, or shrink to what phase 3 asked (growth waits for pending jobs).
        if not self.skip_kept or self._any_resize(snap, allocations, sizes):
            for job in jobs:
                held = allocations.get(job.id)  # (first: most jobs of a busy line hold nothing)
                if not held or not job.active:
                    continue
                want = sizes.get(job.id)
                if want is None:
                    continue
                if all(held.count(r) == n for r, n in want.items()):
                    continue
                if all(held.count(r) >= n for r, n in want.items()):
                    try_place(ws, job, want)
        # (`JobView.pending` and a size, read in C-level passes: a Python step per live job spared)
        waiting = map(is_, map(_STATE, jobs), repeat(JobState.PENDING))
        pending = list(compress(jobs, map(and_, waiting, map(sizes.__contains__, map(_ID, jobs)))))
        head: JobView | None = None
        queues = ws.queued  # (as `try_place` reads it)
        rooms: dict[tuple[Resources, int, Resources], Wait] = {}  # one shared wait per gang that did not fit
        # The one-role gangs that did not fit in the free total `seen` (the same object: nothing placed or
        # released since), by (cpu, memory, gpu) per task and tasks: their wait from `rooms`, without the
        # demand, the test and the key of `Resources` (most of a long line on a busy cluster).
        misfits: dict[tuple[int, int, int, int], Wait] = {}
        seen: Resources | None = None
        order = fair_order(book, pending)
        for job in order:
            want = sizes[job.id]
            never = book.never_within_quota(job) if book is not None else None
            if never:
                ws.rejected[job.id] = never
                continue
            if head is not None:
                if shortcuts and book is None:  # nobody is rejected for quota: the rest wait behind the head
                    rest = [job, *order]
                    ws.block_all_behind(map(_ID, rest), head.id)  # (one C-level update)
                    blocked.extend(rest)
                    break
                ws.block_behind(job.id, head.id)
                blocked.append(job)
                continue
            if not queues and job.id not in allocations:  # `try_place`'s first test, for a job holding nothing
                free = ws.total_free
                shape = None
                if shortcuts and len(want) == 1:
                    (role,) = want  # (its one key, then its count: no items view, iterator and pair per job)
                    n = want[role]
                    task = job.spec.roles[role].resources
                    shape = (task.cpu, task.memory, task.gpu, n)
                    if free is not seen:
                        misfits, seen = {}, free
                    wait = misfits.get(shape)
                    if wait is not None:
                        ws.waits[job.id] = wait
                        blocked.append(job)
                        if strict:
                            head = job
                        continue
                need = demand(job.spec, want)
                if not need.fits_in(free):  # it waits for room (the shared wait `block_for_room` would make)
                    key = (need, sum(want.values()), free)
                    wait = rooms.get(key)
                    if wait is None:
                        wait = rooms[key] = room_wait(job.spec, want, free)
                    ws.waits[job.id] = wait
                    if shape is not None:
                        misfits[shape] = wait
                    blocked.append(job)
                    if strict:
                        head = job
                    continue
            result = try_place(ws, job, want)
            if isinstance(result, str):
                ws.block(job.id, WaitKind.QUOTA, result)
                blocked.append(job)
            elif result is None:
                ws.block_for_room(job, want)
                blocked.append(job)
                if strict:
                    head = job
        return blocked


def fair_place(strict: bool, shortcuts: bool = True) -> PlaceHook:
    """`FairPlace(strict, shortcuts)`: the place hook of the queue-aware presets."""
    return FairPlace(strict, shortcuts)
