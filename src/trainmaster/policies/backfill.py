"""Phase 5: a reservation for the blocked head job, and backfill that cannot delay it.

Predicted finish of a running job: the fitted model where `Snapshot.models`
has one (its `remaining_time`), else the user's `spec.estimate` (seconds at
the job's minimum size, scaled by the GPUs it holds), else unknown. The head
job's reservation is the placement it gets at the earliest time the running
jobs' predicted finishes free enough room; a later job starts now only if it
is predicted to end before that time or keeps off the reserved nodes.
`predict_starts` turns the same predictions into an ETA for every pending job.

The hook (`Reservation`) keeps each running job's model prediction across decisions: a decision asks
the model of every job holding resources, and between two decisions only the jobs that reported have a
new model (most keep theirs and their allocation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import repeat
from operator import attrgetter

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.models.book import JobModel
from trainmaster.policies.cycle import AfterHook
from trainmaster.policies.queues import try_place
from trainmaster.policies.snapshot import JobView, Snapshot, forget_ended
from trainmaster.policies.waits import CAPACITY, Wait, WaitKind
from trainmaster.policies.workspace import Workspace, minimum

_ID, _KIND = attrgetter("id"), attrgetter("kind")
_NO_WAIT = Wait(WaitKind.PRIORITY, "")  # (`_head`: a job without a wait here, whose kind is none for room)


def _size(job: JobView, alloc: Allocation | None = None) -> int:
    """Work units a job runs on: GPUs, or tasks for CPU-only jobs."""
    alloc = job.allocation if alloc is None else alloc
    return (alloc.gpus(job.spec) or len(alloc)) if alloc else 0


def _min_size(job: JobView) -> int:
    return job.spec.min_gpus or sum(s.min for s in job.spec.roles.values())


# job -> the model and allocation its model was last asked about, and the model's answer (`remaining_time`)
# as `predicted_remaining` takes it: seconds >= 0, or None where it is unknown or not finite
Kept = dict[str, tuple[JobModel, Allocation, float | None]]


def predicted_remaining(job: JobView, snap: Snapshot, alloc: Allocation | None = None,
                        kept: Kept | None = None) -> float | None:
    """Seconds `job` still needs on `alloc` (default: what it holds, or its minimum), or None when unknown.

    `kept`: the model's answer is reused while the job's model and `alloc` are the objects it was asked
    about (both immutable: the same answer), and kept there otherwise.
    """
    alloc = job.allocation if alloc is None else alloc
    model = snap.models.get(job.id)
    if model is not None and alloc:
        got = kept.get(job.id) if kept is not None else None
        if got is not None and got[0] is model and got[1] is alloc:
            left = got[2]
        else:
            value = model.remaining_time(alloc.count(Role.WORKER), alloc.count(Role.PS), max(len(alloc.nodes), 1))
            left = max(0.0, float(value)) if value is not None and math.isfinite(value) else None
            if kept is not None:
                kept[job.id] = (model, alloc, left)
        if left is not None:
            return left
    estimate = job.spec.estimate
    if estimate is None:
        return None
    base = _min_size(job)
    size = _size(job, alloc) if alloc else base
    done = job.attained if job.spec.min_gpus else job.runtime * base
    return max(0.0, (estimate * max(base, 1) - done) / max(size, 1))


def predicted_finishes(snap: Snapshot, ws: Workspace, kept: Kept | None = None,
                       unknown_in_line: bool = True) -> dict[str, float | None]:
    """Predicted end of every job holding resources in the workspace (`kept`: see `predicted_remaining`).

    With `kept`, a holder whose kept answer serves (its model and allocation the objects it was asked about,
    the answer known) is read in line: no call per holder, most of them between two decisions.
    `unknown_in_line`: so is a kept unknown answer of a job without an estimate (`predicted_remaining` would
    fall back on the estimate, and answers None without one): every holder's, on Philly, whose models
    never know the steps left. False: such holders call `predicted_remaining` (the reference)."""
    jobs, now = snap.jobs, snap.now
    if kept is None:
        return {jid: (None if (rem := predicted_remaining(jobs[jid], snap, alloc)) is None else now + rem)
                for jid, alloc in ws.allocations.items() if alloc and jid in jobs}
    model_of, seen, job_of = snap.models.get, kept.get, jobs.get
    out: dict[str, float | None] = {}
    for jid, alloc in ws.allocations.items():
        got = seen(jid)
        if got is not None and got[1] is alloc and got[0] is model_of(jid) and (job := job_of(jid)) is not None:
            left = got[2]  # (alloc was non-empty when kept)
            if left is not None:
                out[jid] = now + left  # (what `predicted_remaining` answers)
                continue
            if unknown_in_line and job.spec.estimate is None:
                out[jid] = None
                continue
        if alloc and jid in jobs:
            out[jid] = None if (rem := predicted_remaining(jobs[jid], snap, alloc, kept)) is None else now + rem
    return out


def earliest_start(snap: Snapshot, ws: Workspace, job: JobView, counts: Mapping[Role, int],
                   finishes: Mapping[str, float | None]) -> tuple[float, Allocation] | None:
    """When and where `job`'s gang fits as predicted jobs end; None when no prediction gets it there."""
    alloc = ws.find(job, counts)
    if alloc is not None:
        return snap.now, alloc
    trial = ws.trial()  # release the running jobs as they are predicted to end, then put them all back
    try:
        ends = sorted((t, jid) for jid, t in finishes.items() if t is not None and jid in ws.allocations)
        for i, (t, jid) in enumerate(ends):
            ws.release(snap.jobs[jid])
            if i + 1 < len(ends) and ends[i + 1][0] == t:
                continue
            alloc = ws.find(job, counts)
            if alloc is not None:
                return max(t, snap.now), alloc
        return None
    finally:
        trial.discard()


class Reservation:
    """Reserve for the first job blocked by capacity; start later jobs only where they cannot delay it.

    Declared policy state: `kept`, the running jobs' model predictions (`predicted_remaining`), kept
    across decisions and pruned of ended jobs now and then.
    """

    keep_predictions = True  # False: ask every running job's model at every decision (the reference)
    unknown_in_line = True  # `predicted_finishes`' switch (False: its reference)

    def __init__(self, reserve_after: float = 0.0) -> None:
        self.reserve_after = max(reserve_after, 0.0)
        self.kept: Kept = {}

    def __call__(self, snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        kept = self.kept if self.keep_predictions else None
        if kept is not None:
            forget_ended(kept, snap.jobs)
        return _reserve(snap, blocked, ws, self.reserve_after, kept, self.unknown_in_line)


def backfill(reserve_after: float = 0.0) -> AfterHook:
    """The reservation hook; `reserve_after` > 0 reserves only for a head that has waited that long
    (until then anything that fits starts, as with greedy skipping): a knob between the two."""
    return Reservation(reserve_after)


def _greedy_after(snap: Snapshot, blocked: list[JobView], ws: Workspace, head: JobView, until: float) -> list[JobView]:
    still: list[JobView] = []
    for job in blocked:
        if job.id != head.id and ws.kind(job.id) is WaitKind.PRIORITY:
            result = try_place(ws, job, minimum(job.spec))
            if result is not None and not isinstance(result, str):
                ws.note(job.id, f"started: {head.id} gets a reservation only from t={until:.0f}")
                continue
        still.append(job)
    ws.meanwhile(head.id, f"reserved for from t={until:.0f} if still waiting")
    return still


def _head(blocked: list[JobView], ws: Workspace) -> JobView | None:
    """The first blocked job holding nothing here that waits for room (its wait's kind one of `CAPACITY`).

    In C-level passes: on a busy line the place phase and preemption leave thousands blocked behind priority
    and often none waiting for room (a Python step per blocked job was ~5% of a busy trainmaster decision).
    The kinds are read once (`Workspace.kind`'s None for a job without a wait is a `PRIORITY` sentinel here,
    no capacity kind) and each capacity kind is found by `list.index` (an identity match in C; a set lookup
    would call the enum's Python `__hash__` per job); a Python step only for a match that holds something."""
    ids = list(map(_ID, blocked))
    kinds = list(map(_KIND, map(ws.waits.get, ids, repeat(_NO_WAIT))))
    held = ws.allocations
    first = len(kinds)  # (the earliest match so far: later kinds are searched before it only)
    for kind in CAPACITY:
        k = -1
        while True:
            try:
                k = kinds.index(kind, k + 1, first)
            except ValueError:
                break
            if ids[k] not in held:
                first = k
                break
    return blocked[first] if first < len(kinds) else None


def _reserve(snap: Snapshot, blocked: list[JobView], ws: Workspace, reserve_after: float,
             kept: Kept | None, unknown_in_line: bool = True) -> list[JobView]:
    head = _head(blocked, ws)
    if head is None:
        return blocked
    if snap.now - head.submit_time < reserve_after:
        return _greedy_after(snap, blocked, ws, head, head.submit_time + reserve_after)
    finishes = predicted_finishes(snap, ws, kept, unknown_in_line)
    found = earliest_start(snap, ws, head, minimum(head.spec), finishes)
    if found is None:
        ws.meanwhile(head.id, "no predicted start (running jobs have no estimates): nothing backfills")
        reserved: frozenset[str] = frozenset()
        start = math.inf
    else:
        start, alloc = found
        reserved = frozenset(alloc.nodes)
        ws.eta[head.id] = start
        ws.meanwhile(head.id, f"reserved {','.join(sorted(reserved))} from t={start:.0f}")
    still: list[JobView] = []
    after_head = False
    for job in blocked:
        if job.id == head.id:
            after_head = True
            still.append(job)
            continue
        if not after_head or job.id in ws.allocations or ws.kind(job.id) is not WaitKind.PRIORITY:
            still.append(job)
            continue
        trial = ws.trial()
        result = try_place(ws, job, minimum(job.spec))
        if result is None:  # does not fit now either: it keeps waiting behind the head
            trial.discard()
            still.append(job)
            continue
        if isinstance(result, str):
            trial.discard()
            ws.block(job.id, WaitKind.QUOTA, result)
            still.append(job)
            continue
        duration = predicted_remaining(job, snap, result)
        ends_first = duration is not None and snap.now + duration <= start
        if math.isfinite(start) and (ends_first or not reserved & set(result.nodes)):
            trial.commit()
            ws.note(job.id, f"backfilled: predicted to end by t={snap.now + (duration or 0.0):.0f}"
                    if ends_first else "backfilled: keeps off the reserved nodes")
            continue
        trial.discard()
        ws.block(job.id, WaitKind.RESERVATION, f"would delay {head.id}, which holds a reservation"
                 + (f" from t={start:.0f}" if math.isfinite(start) else ""))
        still.append(job)
    return still


# -- ETAs ----------------------------------------------------------------------
def predict_starts(snap: Snapshot, allocations: Mapping[str, Allocation], pending: list[JobView],
                   known: Mapping[str, float] | None = None, not_before: float | None = None
                   ) -> dict[str, float | None]:
    """Predicted start of each pending job, in the given order, on aggregate capacity (conservative backfill).

    Running jobs free their resources at their predicted finish (never, when
    unknown); each pending job takes the earliest slot where its minimum fits
    for its predicted duration without moving an earlier one. `known` pins
    starts the policy already predicted (the reservation). `not_before`: the pending
    jobs were just decided on and did not start, so none starts before a slot after
    it (a running job's end): aggregate capacity cannot see what held them back
    (a reservation on their nodes, fragmentation). None: no predicted start.
    """
    times: list[float] = [snap.now]
    free: list[Resources] = [snap.cluster.total]

    def cut(t: float) -> int:
        for i, x in enumerate(times):
            if x == t:
                return i
            if x > t:
                times.insert(i, t)
                free.insert(i, free[i - 1])
                return i
        times.append(t)
        free.append(free[-1])
        return len(times) - 1

    def take(need: Resources, start: float, end: float) -> None:
        i = cut(start)
        j = cut(end) if math.isfinite(end) else len(times)
        for k in range(i, j):
            free[k] = free[k] - need

    for jid, alloc in allocations.items():
        job = snap.jobs.get(jid)
        if job is None or not alloc:
            continue
        rem = predicted_remaining(job, snap, alloc)
        take(alloc.resources(job.spec), snap.now, math.inf if rem is None else snap.now + rem)
    out: dict[str, float | None] = {}
    for job in pending:
        need = job.spec.min_resources
        dur = predicted_remaining(job, snap, Allocation())
        length = math.inf if dur is None else dur
        start: float | None = None
        pinned = (known or {}).get(job.id)
        if pinned is not None:
            cut(pinned)
        for i, t in enumerate(times):
            if (pinned is not None and t < pinned) or (pinned is None and not_before is not None and t <= not_before):
                continue
            end = t + length
            if all(need.fits_in(free[k]) for k in range(i, len(times)) if times[k] < end):
                start = t
                break
        out[job.id] = start
        if start is not None:
            take(need, start, start + length)
    return out
