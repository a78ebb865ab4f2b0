"""Phase 6: plan versus reality, as ordered actions with reasons."""

from __future__ import annotations

from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.policies.snapshot import Plan, Snapshot


def _grows_only(old: Allocation, new: Allocation) -> bool:
    return all(new.counts.get(key, 0) >= n for key, n in old.counts.items())


def diff(snap: Snapshot, plan: Plan, *, damping: float = 0.0) -> list[Action]:
    """Actions that turn the snapshot into the plan: stops, then shrinks, then grows, then starts.

    Restart penalty: a resize that only adds tasks to a job (re)started less
    than `damping` seconds ago is skipped; skipping it only leaves capacity
    free, so the plan stays feasible.
    """
    stops: list[Action] = []
    shrinks: list[Action] = []
    grows: list[Action] = []
    starts: list[Action] = []
    for job in snap.jobs.values():
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
    return stops + shrinks + grows + starts
