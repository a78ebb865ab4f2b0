"""optimus' misfit tail in two C-level passes where every spec is in the index (`Optimus.fused_tail`): every
plan, its allocations and waits in order, and the waits shared alike, as the reference's lists and minimum check."""

from __future__ import annotations

import pytest
from tests.replay_helpers import Before, on_and_off
from tests.test_optimus_misfit_tail import replay, workload

from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import JobView, Plan
from trainmaster.workloads.base import Workload


def _sharing(plan: Plan) -> list[int]:
    """Which earlier wait each of the plan's waits is (the same object), in order."""
    first: dict[int, int] = {}
    return [first.setdefault(id(w), k) for k, w in enumerate(plan.waits.values())]


def _indexed(self: Optimus, jobs: list[JobView], start: int, *_: object) -> bool:
    """Whether every spec of the tail is in the index before the fused call (else some are worked out first)."""
    return all(id(j.spec) in self._by_spec for j in jobs[start:])


@pytest.mark.parametrize(("name", "cluster"), [("line", "4x4"), ("mixed", "4x4"), ("shapes", "4x4"),
                                               ("sized", "2x4")])
def test_fused_tail_plans_as_the_reference(name: str, cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On and off: the same plans (`same_plans`), the same waits shared alike, each tail's answer and the shapes
    worked out, in order, alike; the fused passes served the tails, both with every spec in the index and with
    some new to it (worked out there)."""
    jobs: Workload = workload(name)
    fast, slow = on_and_off(monkeypatch, lambda: replay("optimus", jobs, cluster), (Optimus, "fused_tail"),
                            spies={"tries": (Optimus, "_misfit_tail"), "shapes": (Optimus, "_tail_shapes"),
                                   "fused": (Optimus, "_fused_tail", Before(_indexed)),
                                   "worked": (Optimus, "_shape")})
    for a, b in zip(fast.plans, slow.plans, strict=True):
        assert _sharing(a) == _sharing(b)
    assert fast.calls["tries"] == slow.calls["tries"]  # (each tail's answer)
    assert fast.calls["worked"] == slow.calls["worked"]
    assert len(slow.calls["shapes"]) == len(slow.calls["tries"]) > 20 and not slow.calls["fused"]
    assert len(fast.calls["shapes"]) + len(fast.calls["fused"]) == len(fast.calls["tries"])
    assert len(fast.calls["shapes"]) < 3  # (the reference's only before the index has a total)
    assert fast.calls["fused"].count(True) > 20 and False in fast.calls["fused"]
    if name == "mixed":  # a minimum in the tail that might fit: one by one from there, alike
        assert False in fast.calls["tries"]
