"""optimus' misfit tail in two C-level passes where every spec is in the index (`Optimus.fused_tail`): every
plan, its allocations and waits in order, and the waits shared alike, as the reference's lists and minimum check."""

from __future__ import annotations

import pytest
from tests.replay_helpers import on_and_off
from tests.test_optimus_misfit_tail import replay, workload

from trainmaster.core.job import Role
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload


def _sharing(plan: Plan) -> list[int]:
    """Which earlier wait each of the plan's waits is (the same object), in order."""
    first: dict[int, int] = {}
    return [first.setdefault(id(w), k) for k, w in enumerate(plan.waits.values())]


@pytest.mark.parametrize(("name", "cluster"), [("line", "4x4"), ("mixed", "4x4"), ("shapes", "4x4"),
                                               ("sized", "2x4")])
def test_fused_tail_plans_as_the_reference(name: str, cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On and off: the same plans (`same_plans`), the same waits shared alike; the fused passes served most
    tails (the reference's `_tail_shapes` asked only where a spec was new to the index, or never in the index)."""
    jobs: Workload = workload(name)
    fast, slow = on_and_off(monkeypatch, lambda: replay("optimus", jobs, cluster),
                            (Optimus, "fused_tail"),
                            spies={"tries": (Optimus, "_misfit_tail"), "shapes": (Optimus, "_tail_shapes")})
    for a, b in zip(fast.plans, slow.plans, strict=True):
        assert _sharing(a) == _sharing(b)
    assert fast.calls["tries"] == slow.calls["tries"]  # (each tail's answer)
    assert len(slow.calls["shapes"]) == len(slow.calls["tries"]) > 20
    assert len(fast.calls["shapes"]) * 2 < len(fast.calls["tries"])  # (most tails: every spec in the index)
    if name == "mixed":  # a minimum in the tail that might fit: one by one from there, alike
        assert False in fast.calls["tries"]


def test_a_tail_with_a_new_spec_takes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line whose every job is new to the tail at its first decision there (the index lacks its spec): the
    reference's path works its shape out; later decisions read it off the index. Minimums of 1-3 GPUs."""
    line = workload("shapes")
    fast, _ = on_and_off(monkeypatch, lambda: replay("optimus", line, "4x4"), (Optimus, "fused_tail"),
                         spies={"tries": (Optimus, "_misfit_tail"), "shapes": (Optimus, "_tail_shapes")})
    assert 0 < len(fast.calls["shapes"]) < len(fast.calls["tries"])
    assert {j.spec.roles[Role.WORKER].min for j in line.jobs} == {1, 2, 3}
