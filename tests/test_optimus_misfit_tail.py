"""optimus' minimums pass ends in one step once no later minimum fits (`Optimus._misfit_tail`), exactly.

Past the point where free GPUs are fewer than any minimum asks for, the reference visits every later job
to give it its minimum's misfit wait; the tail path gives them all at once after checking that none of
their minimums fits. Contended workloads (a long line, sized jobs with models, the trainmaster preset that
sizes with the same greedy) replay with and without it, and without `Optimus.spec_index`: every plan, the
order of its allocations, its waits in order and the shared wait objects must be equal.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.replay_helpers import Recorder, compressed, on_and_off, same_plans

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import trainmaster
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.ps_truth import ps_workload


def replay(preset: str, workload: Workload, cluster: str) -> list[Plan]:
    """Every plan of `preset` (built here, after the test set its switches)."""
    cycle: Cycle = Optimus().cycle if preset == "optimus" else trainmaster.make()
    recorder = Recorder(cycle)
    recorder.uses_models = True  # (both presets': the controller fits models online from reports)
    engine = SimEngine(parse_shorthand(cluster), workload, SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
    Controller(engine, recorder).run()
    return recorder.plans


def workload(name: str) -> Workload:
    """The synthetic lines run ten times faster (`compressed`): the same lines in a tenth of the decisions."""
    if name == "line":  # a long line at minimum sizes (no targets: no model predicts)
        return compressed(load_workload("synthetic:300:20", max_factor=2.0, seed=11, oracle=True))
    if name == "mixed":  # the first jobs ask for 3 GPUs: a 1-GPU job that joins the tail may still fit
        line = load_workload("synthetic:120:20", max_factor=2.0, seed=11, oracle=True)
        return compressed(replace(line, jobs=tuple(
            replace(j, spec=replace(j.spec, roles={Role.WORKER: replace(j.spec.roles[Role.WORKER], min=3,
                                                                         max=max(3, j.spec.roles[Role.WORKER].max))}))
            if k < 40 else j for k, j in enumerate(line.jobs))))
    if name == "shapes":  # minimums of 1, 2 and 3 GPUs in turn: each tail holds jobs of several shapes
        line = load_workload("synthetic:200:20", max_factor=2.0, seed=11, oracle=True)
        workers = [(j.spec.roles[Role.WORKER], 1 + k % 3) for k, j in enumerate(line.jobs)]
        return compressed(replace(line, jobs=tuple(
            replace(j, spec=replace(j.spec, roles={Role.WORKER: replace(w, min=least, max=max(least, w.max))}))
            for j, (w, least) in zip(line.jobs, workers, strict=True))))
    return ps_workload(40, rate_per_hour=60, seed=3)  # loss targets: models predict, jobs grow and shrink


# trainmaster on "shapes" is left out: ~30 s a case, and it did not catch the wrong-shape break that optimus on
# "shapes" catches; optimus on "line" leaves out the spec index (one shape: nothing to read off a wrong job)
@pytest.mark.parametrize(("preset", "name", "cluster"),
                         [("optimus", "line", "4x4"), ("optimus", "mixed", "4x4"), ("optimus", "sized", "2x4"),
                          ("optimus", "shapes", "4x4"), ("trainmaster", "line", "4x4")])
def test_misfit_tail_and_spec_index_plan_as_one_by_one(preset: str, name: str, cluster: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tail path against one by one; then `Optimus.spec_index` (the tail reads its shapes off the index by
    spec object) against by job id with each one's spec and total checked: the same plans, one fast replay
    serving both comparisons."""
    jobs = workload(name)
    fast, slow = on_and_off(monkeypatch, lambda: replay(preset, jobs, cluster), (Optimus, "misfit_tail"),
                            spies={"tries": (Optimus, "_misfit_tail")})
    for a, b in zip(fast.plans, slow.plans, strict=True):  # the waits shared alike
        assert len({id(w) for w in a.waits.values()}) == len({id(w) for w in b.waits.values()})
    tries = fast.calls["tries"]
    assert not slow.calls["tries"]  # the reference never tried it
    assert sum(tries) > 20  # the tail path served
    if name == "mixed":  # and found, once, a minimum in the tail that might fit: one by one from there
        assert False in tries
    if (preset, name) == ("optimus", "line"):
        return
    with monkeypatch.context() as patch:
        patch.setattr(Optimus, "spec_index", False)
        same_plans(fast.plans, replay(preset, jobs, cluster))
    if name == "shapes":  # tails of several shapes (so a shape read off the wrong job shows): their waits differ
        assert max(len({id(w) for w in p.waits.values()}) for p in fast.plans) >= 3
