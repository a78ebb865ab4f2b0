"""`drf`: dominant resource fairness (Ghodsi et al., NSDI'11) by progressive filling, gang-aware.

Each turn goes to the queue (tenant) with the lowest dominant share of the
cluster, then within it to the job with the lowest dominant share, then the
earliest submitted. A pending job's turn places its whole minimum gang or
skips it (work-conserving: a job that does not fit never blocks the others);
an elastic job that just started may take one more replica per turn up to its
maximum, so idle capacity is shared max-min fairly. Running jobs keep what
they hold: `drf` never preempts or resizes.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping
from itertools import filterfalse, repeat
from operator import itemgetter
from typing import cast

from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.policies import turns
from trainmaster.policies.cycle import Cycle, by_submit_time, current_or_min
from trainmaster.policies.pending import PendingLine
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.waits import Wait
from trainmaster.policies.workspace import Workspace, minimum, room_wait

_ID = itemgetter(1)


def _grow(job: JobView, counts: Mapping[Role, int]) -> dict[Role, int] | None:
    """One more replica of the role furthest below its maximum, or None at the maximum."""
    roles = [(counts.get(r, 0) / s.max, r.value, r) for r, s in job.spec.roles.items() if counts.get(r, 0) < s.max]
    if not roles:
        return None
    role = min(roles)[2]
    out = dict(counts)
    out[role] = out.get(role, 0) + 1
    return out


def progressive_fill(snap: Snapshot, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]],
                     ws: Workspace) -> list[JobView]:
    """The place hook: serve the lowest dominant share first until nobody can take more.

    Two levels of heaps: queues by dominant share, and inside each queue its
    candidate jobs by (job share, rank). A turn changes only the served queue's
    share, so no entry ever goes stale.
    """
    total = snap.cluster.total
    queue_held: dict[str, Resources] = {}
    for jid, alloc in ws.allocations.items():
        spec = ws.snap.jobs[jid].spec  # `snap` may hold only the pending jobs
        queue_held[spec.queue] = queue_held.get(spec.queue, Resources()) + alloc.resources(spec)
    members: dict[str, list[tuple[float, int, str]]] = {}
    for i, job in enumerate(jobs):
        if not job.active and job.id in sizes:
            members.setdefault(job.spec.queue, []).append((0.0, ws.rank.get(job.id, i), job.id))
    queues = []
    for name, heap in members.items():
        heapq.heapify(heap)
        queues.append((queue_held.get(name, Resources()).dominant_share(total), name))
    heapq.heapify(queues)
    blocked: list[JobView] = []
    while queues:
        _, name = heapq.heappop(queues)
        _, rank, jid = heapq.heappop(members[name])
        job = snap.jobs[jid]
        held = ws.allocations.get(jid)
        want = _grow(job, {r: held.count(r) for r in job.spec.roles}) if held else dict(sizes[jid])
        found = None if want is None else ws.find(job, want, prefer=held.nodes if held else ())
        if found is None:
            if not held and want is not None:
                ws.block_for_room(job, want)
                blocked.append(job)
        else:  # a started job that cannot grow keeps its size and leaves the heap
            ws.assign(job, found)
            ws.want[jid] = dict(want or {})
            now_held = found.resources(job.spec)
            queue_held[name] = queue_held.get(name, Resources()) + now_held - (held.resources(job.spec) if held
                                                                                else Resources())
            heapq.heappush(members[name], (now_held.dominant_share(total), rank, jid))
        if members[name]:
            heapq.heappush(queues, (queue_held.get(name, Resources()).dominant_share(total), name))
    return blocked


def _runs(part: list[tuple[float, str]], i: int, placed: list[tuple[float, str]], before: list[tuple[Resources, int]],
          last: tuple[Resources, int]) -> Iterator[tuple[int, int, Resources, int]]:
    """The jobs of a shape whose turn failed at `part[i]`, as runs `part[lo:hi]` between the queue's next
    placements (`placed`, in line order): each with the free capacity and turn just before the placement
    that ends it (`before`), or at the queue's last turn (`last`)."""
    k = bisect.bisect_left(placed, part[i])  # the queue's next placement after this job's turn
    lo = i
    while lo < len(part):
        hi = bisect.bisect_left(part, placed[k], lo) if k < len(placed) else len(part)
        if hi > lo:
            free, at = before[k] if k < len(placed) else last
            yield lo, hi, free, at
        lo, k = hi, k + 1


def fill_by_shape(snap: Snapshot, ids: list[str], line: PendingLine, ws: Workspace, lined: bool = True) -> bool:
    """`from_line` for `progressive_fill` when every pending job has a fixed size and one role.

    The turns go as in `progressive_fill` (the queue of lowest share, then its
    pending jobs in line order), but free capacity only shrinks, so once a job
    does not fit, no later job of its shape (`pending.shape_of`) does: each shape
    is tried until it fails, and its other jobs wait at once, each with the free
    capacity its turn would have seen (a queue's failed turns follow each other,
    up to its next placement). False (nothing changed) for elastic or
    multi-role jobs, whose growth turns `progressive_fill` takes.

    With one queue (and the controller's snapshots), the waits are pieces of the
    line (`turns`), looked up per job; `lined=False` writes every job's wait into
    the plan instead (the reference the pieces are checked against).
    """
    line.reshape(snap, ids)
    by_shape, bad = line.by_shape, line.bad
    for shape in by_shape:
        roles = shape[3]
        if len(roles) != 1 or roles[0][2] != roles[0][3]:  # one role, not elastic: no growth turns
            return False
    jobs, total = snap.jobs, snap.cluster.total
    queue_held = line.held.of(ws.snap, ws.allocations)  # (nothing is placed yet: what the active jobs hold)
    members: dict[str, list[tuple[tuple[float, str], int, list[tuple[float, str]]]]] = {}
    for part in by_shape.values():
        if part[0][1] not in bad:
            members.setdefault(jobs[part[0][1]].spec.queue, []).append((part[0], 0, part))
    queues = []
    for name, heap in members.items():
        heapq.heapify(heap)
        queues.append((queue_held.get(name, Resources()).dominant_share(total), name))
    heapq.heapify(queues)
    placed: dict[str, list[tuple[float, str]]] = {name: [] for name in members}  # per queue, in line order
    before: dict[str, list[tuple[Resources, int]]] = {name: [] for name in members}  # free capacity and turn
    last: dict[str, tuple[Resources, int]] = {}  # the same at the queue's last turn (failed turns after the end)
    turn = 0
    failed: list[tuple[str, list[tuple[float, str]], int, JobView, dict[Role, int]]] = []
    while queues:
        _, name = heapq.heappop(queues)
        heap = members[name]
        turn += 1
        last[name] = (ws.total_free, turn)
        if not heap:  # only jobs that cannot fit are left: this is their turn
            continue
        key, i, part = heapq.heappop(heap)
        job = jobs[key[1]]
        want = minimum(job.spec)
        found = ws.find(job, want)
        if found is None:
            failed.append((name, part, i, job, want))
        else:
            placed[name].append(key)
            before[name].append((ws.total_free, turn))
            ws.assign(job, found)
            ws.want[job.id] = dict(want)
            queue_held[name] = queue_held.get(name, Resources()) + found.resources(job.spec)
            if i + 1 < len(part):
                heapq.heappush(heap, (part[i + 1], i + 1, part))
        if heap or (found is not None and any(f[0] == name for f in failed)):
            heapq.heappush(queues, (queue_held.get(name, Resources()).dominant_share(total), name))
    line.turns, prev = None, line.turns
    pending = snap.pending_ids
    if len(members) <= 1 and isinstance(pending, PendingIds) and lined and not ws.waits and not ws.notes:
        # One queue: its turns went in line order; the waits as pieces of the line (`turns`), read per job.
        name = next(iter(members), "")
        pieces = {}
        for _, part, i, job, want in failed:
            runs = list(_runs(part, i, placed[name], before[name], last[name]))
            pieces[line.shape[part[i][1]]] = turns.piece([part[lo] for lo, _, _, _ in runs],
                                                         [room_wait(job.spec, want, f) for _, _, f, _ in runs], part)
        now = line.turns = turns.Turns(pieces, jobs, ws.memo.never, (pending.origin, pending.version))
        ws.lined = turns.lined_waits(now, line, ids, placed.get(name, []), prev, pending)
        return True
    if not failed:
        return True
    segments: list[tuple[list[tuple[float, str]], Wait]] = []  # each failed turn's run of jobs and their wait
    order: list[tuple[int, tuple[float, str]]] = []  # (turn, key) of each waiting job, for the waits' order
    for name, part, i, job, want in failed:
        for lo, hi, free, at in _runs(part, i, placed[name], before[name], last[name]):
            segments.append((part[lo:hi], room_wait(job.spec, want, free)))
            if len(members) > 1:
                order.extend(zip(repeat(at), part[lo:hi]))
    if len(members) == 1:  # one queue: its turns went in line order
        waits = dict.fromkeys(filterfalse(bad.__contains__, ids) if bad else ids)
        for key in placed[next(iter(members))]:
            del waits[key[1]]
    else:  # a queue's waiting jobs took their turns just before its next placement (or at its last turn)
        order.sort()
        waits = dict.fromkeys(key[1] for _, key in order)
    for seg, wait in segments:  # straight into the plan's order: one C-level pass per segment, no copies
        waits.update(dict.fromkeys(map(_ID, seg), wait))
    if ws.waits:
        ws.waits.update(cast(dict[str, Wait], waits))
    else:
        ws.waits = cast(dict[str, Wait], waits)
    return True


def make() -> Cycle:
    # Its line looks up only the jobs that changed (journal, pieces): its snapshots may hold a frozen book.
    return Cycle(name="drf", order=by_submit_time, size=current_or_min, place=progressive_fill, pending_only=True,
                 from_line=fill_by_shape, reads_few_jobs=True)
