"""Phase 6: plan versus reality, as ordered actions with reasons."""

from __future__ import annotations

from itertools import compress
from operator import is_not

from trainmaster.controller.views import Frozen
from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.states import JobState
from trainmaster.policies.snapshot import JobView, Plan, Snapshot


def _grows_only(old: Allocation, new: Allocation) -> bool:
    return all(new.counts.get(key, 0) >= n for key, n in old.counts.items())


def _changed(snap: Snapshot, plan: Plan) -> list[JobView]:
    """The jobs `diff` may act on, in `snap.jobs` order, found without a pass over every waiting job.

    Only a job the plan runs on something other than what it holds, or a job
    that holds resources and is not in the plan, can need an action.
    """
    jobs, held = snap.jobs, snap.held
    assert held is not None
    wanted = plan.allocations
    found = [jid for jid in compress(wanted, map(is_not, map(held.get, wanted), wanted.values())) if jid in jobs]
    found += held.keys() - plan.allocations.keys()
    if len(found) > 1 and isinstance(jobs, Frozen):  # the order a full pass would meet them in
        found = jobs.order(found)
    elif len(found) > 1:  # (one C-level pass, no index built)
        found = list(filter(set(found).__contains__, jobs))
    return [jobs[jid] for jid in found]


def diff(snap: Snapshot, plan: Plan, *, damping: float = 0.0) -> list[Action]:
    """Actions that turn the snapshot into the plan: stops, then shrinks, then grows, then starts.

    `plan.rebatch` adds a resize to the same allocation with a new batch for
    each running job the policy moves to another batch where it stands.

    Restart penalty: a resize that only adds tasks to a job (re)started less
    than `damping` seconds ago is skipped; skipping it only leaves capacity
    free, so the plan stays feasible.
    """
    stops: list[Action] = []
    shrinks: list[Action] = []
    grows: list[Action] = []
    starts: list[Action] = []
    jobs = snap.jobs.values() if snap.held is None else _changed(snap, plan)
    for job in jobs:
        want = plan.allocations.get(job.id, EMPTY)
        if want is job.allocation:  # unchanged (pending jobs hold EMPTY): the common case, decided fast
            continue
        have = job.allocation if job.active else EMPTY
        if want == have:
            continue
        reason = plan.reasons.get(job.id, "")
        if not want:
            stops.append(Action(ActionKind.STOP, job.id, job.spec, EMPTY, reason or "preempted by the policy",
                                StopCause.PREEMPT))
        elif not have:
            starts.append(Action(ActionKind.START, job.id, job.spec, want, reason or "placed",
                                 batch=plan.batch.get(job.id)))
        elif _grows_only(have, want):
            recent = job.running_since is not None and snap.now - job.running_since < damping
            if not recent:
                grows.append(Action(ActionKind.RESIZE, job.id, job.spec, want,
                                    reason or f"grow {have.describe()} -> {want.describe()}",
                                    batch=plan.batch.get(job.id)))
        else:
            shrinks.append(Action(ActionKind.RESIZE, job.id, job.spec, want,
                                  reason or f"resize {have.describe()} -> {want.describe()}",
                                  batch=plan.batch.get(job.id)))
    for jid, batch in plan.rebatch.items():  # a batch change in place: same allocation, new batch
        view = snap.jobs.get(jid)
        kept = plan.allocations.get(jid)
        if view is not None and view.state is JobState.RUNNING and kept and kept == view.allocation:
            grows.append(Action(ActionKind.RESIZE, jid, view.spec, kept, f"batch -> {batch}", batch=batch))
    return stops + shrinks + grows + starts
