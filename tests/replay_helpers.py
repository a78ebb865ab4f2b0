"""Pieces the identity tests share: a policy that keeps every plan, and the eager note loop.

Fast paths are proved by replaying with and without them; these are the two halves those replays
compare against (one copy each).
"""

from __future__ import annotations

from collections.abc import Mapping

from trainmaster.controller.loop import Controller
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.snapshot import Plan, Snapshot


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
