"""`fifo`: gang scheduling in strict submit order, never preempting."""

from __future__ import annotations

from trainmaster.policies.cycle import Cycle, by_submit_time, current_or_min, head_of_line, place_in_order


def make() -> Cycle:
    return Cycle(name="fifo", order=by_submit_time, size=current_or_min, place=place_in_order(strict=True),
                 pending_only=True, from_line=head_of_line, reads_few_jobs=True)
