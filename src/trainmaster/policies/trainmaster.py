"""`trainmaster`: queues and fair share, priorities and preemption, elastic fill, reservation and backfill.

`build` assembles any combination of this issue's rules into a `Cycle`; the
`trainmaster` preset turns them all on and learns models online from reports
(`uses_models`). Sizing is EDL's elastic fill (shrink for pending jobs in
phase 3, grow into idle capacity last in phase 5), with Optimus' marginal
gain from the fitted models choosing who grows and when growing stops paying;
jobs without a predicting model grow by least fulfillment. (Optimus' own size
phase re-decides every job from an empty cluster; this one keeps running jobs
where they are, so only the gain rule is shared, not the preset.) Models also
give the running jobs' predicted finish for reservations and `why`'s ETAs.
"""

from __future__ import annotations

from typing import Literal

from trainmaster.policies.backfill import backfill as backfill_hook
from trainmaster.policies.cycle import AfterHook, Cycle, current_or_min
from trainmaster.policies.elastic import LOAD_LINE, grow_into_idle, shrink_for_pending
from trainmaster.policies.fairshare import fair_place
from trainmaster.policies.preemption import MIN_RUNTIME, preempt
from trainmaster.policies.queues import by_priority

Backfill = Literal["none", "greedy", "reserve"]


def build(name: str, *, backfill: Backfill = "reserve", elastic: bool = True, preemption: bool = True,
          min_runtime: float = MIN_RUNTIME, load_line: float = LOAD_LINE, interval: float | None = 300.0,
          use_models: bool = False, reserve_after: float = 0.0, victim_index: bool = True) -> Cycle:
    """A queue-aware cycle.

    `backfill`: "none" (strict order: a blocked head job blocks everyone after
    it), "greedy" (skip it: start anything that fits), "reserve" (reservation
    for the head job plus backfill that cannot delay it; with `reserve_after`
    seconds, only once the head has waited that long, greedy until then).
    """
    strict = backfill != "greedy"
    after: list[AfterHook] = []
    if preemption:
        after.append(preempt(min_runtime, victim_index))
    if backfill == "reserve":
        after.append(backfill_hook(reserve_after))
    if elastic:
        after.append(grow_into_idle(load_line, use_models=use_models))
    return Cycle(
        name=name,
        order=by_priority,
        size=shrink_for_pending(strict, load_line) if elastic else current_or_min,
        place=fair_place(strict),
        after=tuple(after),
        interval=interval,
        uses_models=use_models,
    )


def make() -> Cycle:
    return build("trainmaster", use_models=True)
