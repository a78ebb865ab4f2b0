"""Phase 5: priority preemption within a queue, services first, reclaim of borrowed capacity across queues.

A blocked job may evict:
- any training job, when it is a service (EDL's online services start at once);
- lower-priority jobs of its own queue, once they ran `min_runtime` seconds;
- jobs of other queues that run on borrowed capacity (their queue stays at or
  above its quota after the eviction), when the claimant's queue is still
  within its own quota, also after `min_runtime`.
Victims are tried in order of least work lost since their last checkpoint
(GPU-seconds, counting periodic checkpoints), then lowest priority; evictions
stop as soon as the claimant's whole gang fits, and victims it did not need
are put back. Nothing is evicted when the gang would still not fit.
"""

from __future__ import annotations

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobKind
from trainmaster.policies.cycle import AfterHook
from trainmaster.policies.queues import PRIORITY, QUOTA, QueueBook, reason, release, try_place
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace

MIN_RUNTIME = 600.0


def since_checkpoint(job: JobView, now: float) -> float:
    """Seconds of work a stop now would lose: since the last checkpoint, periodic ones included."""
    if not job.active or job.running_since is None:
        return 0.0
    base = max(job.last_checkpoint or job.running_since, job.running_since)
    elapsed = max(0.0, now - base)
    every = job.spec.checkpoint_every
    return elapsed % every if every > 0 else elapsed


def work_lost(job: JobView, now: float) -> float:
    """GPU-seconds (task-seconds for CPU jobs) lost if `job` is stopped now."""
    size = job.gpus or len(job.allocation)
    return size * since_checkpoint(job, now)


def _victim_kind(claimant: JobView, victim: JobView, book: QueueBook, snap: Snapshot, min_runtime: float,
                 quota_blocked: bool, held: Allocation) -> str | None:
    """How `claimant` may evict `victim` ("service", "priority", "reclaim"), or None."""
    if victim.id == claimant.id or victim.spec.kind is JobKind.SERVICE:
        return None
    if claimant.spec.kind is JobKind.SERVICE:
        return "service"
    started_now = not victim.active  # placed in this very decision: taking it back costs nothing
    if not started_now and (victim.running_since is None or snap.now - victim.running_since < min_runtime):
        return None
    same_queue = book.queue_of(victim) == book.queue_of(claimant)
    if same_queue and victim.spec.priority < claimant.spec.priority:
        return "priority"
    if (not quota_blocked and not same_queue and book.within_quota(claimant, claimant.spec.min_resources)
            and book.lendable(victim, held.resources(victim.spec))):
        return "reclaim"
    return None


class _Holders:
    """The jobs holding resources, indexed by queue and priority, so each claimant scans only possible victims.

    A superset filter in front of `_victim_kind`: a non-service claimant can
    evict only lower-priority jobs of its own queue, or (reclaim) jobs of other
    queues; a service, any of them. Kept in step with `ws.allocations` by `sync`.
    """

    def __init__(self, snap: Snapshot, ws: Workspace, book: QueueBook, indexed: bool = True) -> None:
        self.snap, self.ws, self.book = snap, ws, book
        self.indexed = indexed  # False: scan every holder (the reference the index must plan like)
        self.index: dict[str, dict[int, dict[str, None]]] = {}
        self.where: dict[str, tuple[str, int]] = {}
        for jid, alloc in ws.allocations.items():
            if alloc and jid in snap.jobs:
                self._add(jid)

    def _add(self, jid: str) -> None:
        job = self.snap.jobs[jid]
        key = self.where[jid] = (self.book.queue_of(job), job.spec.priority)
        self.index.setdefault(key[0], {}).setdefault(key[1], {})[jid] = None

    def sync(self, *jids: str) -> None:
        """Re-index `jids` after their allocations changed."""
        for jid in jids:
            holds = bool(self.ws.allocations.get(jid)) and jid in self.snap.jobs
            key = self.where.get(jid)
            if key is not None and not holds:
                del self.index[key[0]][key[1]][jid]
                del self.where[jid]
            elif key is None and holds:
                self._add(jid)

    def candidates(self, claimant: JobView, quota_blocked: bool) -> list[str]:
        """Every holder `_victim_kind` might accept for `claimant` (maybe more, never fewer)."""
        if not self.indexed:
            return [jid for jid, alloc in self.ws.allocations.items() if alloc and jid in self.snap.jobs]
        mine = self.book.queue_of(claimant)
        service = claimant.spec.kind is JobKind.SERVICE
        reclaim = not service and not quota_blocked and self.book.within_quota(claimant, claimant.spec.min_resources)
        out: list[str] = []
        for queue, by_priority in self.index.items():
            if queue == mine:
                for priority, jids in by_priority.items():
                    if service or priority < claimant.spec.priority:
                        out.extend(jids)
            elif service or reclaim:
                for jids in by_priority.values():
                    out.extend(jids)
        return out


def _serve(claimant: JobView, snap: Snapshot, ws: Workspace, book: QueueBook, holders: _Holders,
           min_runtime: float) -> tuple[bool, list[str]]:
    """Evict what `claimant` needs to start, if that makes its gang fit: (started, ids of jobs it moved)."""
    quota_blocked = ws.reasons.get(claimant.id, "").startswith(QUOTA)
    want = {role: spec.min for role, spec in claimant.spec.roles.items()}
    running = []
    for jid in holders.candidates(claimant, quota_blocked):
        a = ws.allocations.get(jid)
        if a and _victim_kind(claimant, snap.jobs[jid], book, snap, min_runtime, quota_blocked, a):
            running.append(snap.jobs[jid])
    if not running:
        return False, []
    running.sort(key=lambda v: (work_lost(v, snap.now), v.spec.priority, -(v.running_since or snap.now), v.id))
    evicted: list[tuple[JobView, Allocation, str]] = []
    placed = False
    for victim in running:
        held = ws.allocations.get(victim.id)
        if not held:
            continue
        kind = _victim_kind(claimant, victim, book, snap, min_runtime, quota_blocked, held)  # usage moved
        if kind is None:
            continue
        release(ws, book, victim)
        evicted.append((victim, held, kind))
        result = try_place(ws, book, claimant, want)
        if result is not None and not isinstance(result, str):
            placed = True
            break
    moved = [victim.id for victim, _, _ in evicted]
    if not placed:
        for victim, held, _ in reversed(evicted):
            ws.assign(victim, held)
            book.swap(victim, None, held)
        return False, moved
    ws.reasons[claimant.id] = f"preempted {len(evicted)} job(s) to start" if evicted else "placed"
    for victim, held, kind in reversed(evicted):
        if ws.fits(victim, held) and book.quota_problem(victim, None, held) is None:
            ws.assign(victim, held)  # not needed after all
            book.swap(victim, None, held)
            continue
        if kind == "reclaim":
            ws.reasons[victim.id] = reason(QUOTA, f"reclaimed by queue {book.queue_of(claimant)} "
                                                  f"for {claimant.id}: it ran on borrowed capacity")
        else:
            ws.reasons[victim.id] = reason(PRIORITY, f"preempted by {claimant.id} ({kind}, "
                                                     f"priority {claimant.spec.priority})")
    return True, moved


def preempt(min_runtime: float = MIN_RUNTIME, victim_index: bool = True) -> AfterHook:
    """Priority preemption and reclaim; `victim_index=False` scans every holder (slower, same plans)."""
    def hook(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        book = QueueBook(snap, ws)
        holders = _Holders(snap, ws, book, victim_index)
        still: list[JobView] = []
        for claimant in blocked:
            if claimant.id in ws.allocations or claimant.id in ws.rejected:
                continue
            started, moved = _serve(claimant, snap, ws, book, holders, min_runtime)
            holders.sync(claimant.id, *moved)
            if not started:
                still.append(claimant)
        return still

    return hook
