"""Pieces the identity tests share: a policy that keeps every plan, and the eager note loop.

Fast paths are proved by replaying with and without them; these are the two halves those replays
compare against (one copy each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainmaster.controller.loop import Controller
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.snapshot import Plan, Snapshot


def same_plans(fast: Sequence[Plan], slow: Sequence[Plan], least: int = 50) -> None:
    """Two replays planned alike: more than `least` plans, each equal, its allocations (the order the
    controller's actions follow) and its waits in the same order."""
    assert len(fast) == len(slow) > least
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.allocations) == list(b.allocations)
        assert list(a.waits) == list(b.waits)
        assert [a.waits[j] for j in a.waits] == [b.waits[j] for j in b.waits]


class Recorder:
    """A policy that decides with `cycle` and keeps every plan."""

    def __init__(self, cycle: Cycle) -> None:
        self.cycle = cycle
        self.name, self.interval, self.uses_models = cycle.name, cycle.interval, cycle.uses_models
        self.reads_few_jobs = cycle.reads_few_jobs  # the snapshot the preset gets in the product
        self.plans: list[Plan] = []

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.cycle.decide(snapshot)
        self.plans.append(plan)
        return plan


def eager(self: Controller, changed: dict[str, str], rejected: Mapping[str, str], now: float) -> None:
    """The per-record loop the note streams replace: note every changed reason on its record at once."""
    for jid, reason in changed.items():
        record = self.live.get(jid)
        if record is None or jid in rejected:
            continue
        if record.why != reason or not record.decisions or record.decisions[-1][1] != reason:
            record.note(now, reason)
        self._said[jid] = reason
