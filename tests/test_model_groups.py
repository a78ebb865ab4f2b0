"""Waiting jobs without reports served from one model per group (`Learning.grouped`): every snapshot's models
and every plan as when each waiting job has its own model, republished at each refresh of its type's prior."""

from __future__ import annotations

from dataclasses import fields, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType

import pytest
from tests.replay_helpers import same_plans
from tests.test_learning_refresh import Seen, _seen

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.controller.model_groups import ModelGroups, ModelsView, same_but_id
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel, ModelBook
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import LinearTruth, Workload
from trainmaster.workloads.philly import load_philly


@cache
def _philly(shared_data: Path) -> Workload:
    """Philly's first 120 jobs, one every 2 s, runs cut to 1,000-3,000 s: one type without targets, a line of
    jobs without reports (the full trace's case), and enough shapes on 4x8 for the type's prior to fit."""
    wl = load_philly(shared_data / "pollux" / "philly.csv", limit=120)
    return replace(wl, jobs=tuple(
        replace(j, submit_time=2.0 * i, truth=LinearTruth(duration=1000.0 + 2000.0 * (i % 3 == 0), gpus=j.truth.gpus))
        for i, j in enumerate(wl.jobs) if isinstance(j.truth, LinearTruth)))


def _replay(preset: str, grouped: bool, shared_data: Path, every: int = 10
            ) -> tuple[list[dict[str, Seen]], list[Plan], int]:
    """Every `every`-th snapshot's models as a policy reads them, every plan, and the most jobs ever grouped."""
    policy = make_policy(preset)
    models: list[dict[str, Seen]] = []
    plans: list[Plan] = []
    most = [0]

    class Recording:
        name, uses_models, interval, reads_few_jobs = policy.name, True, policy.interval, policy.reads_few_jobs

        def decide(self, snap: Snapshot) -> Plan:
            if len(plans) % every == 0:
                models.append({jid: _seen(m) for jid, m in snap.models.items()})
            if isinstance(snap.models, ModelsView):
                most[0] = max(most[0], len(learning.groups))
            plans.append(policy.decide(snap))
            return plans[-1]

    engine = SimEngine(parse_shorthand("4x8"), _philly(shared_data),
                       SimConfig(report_interval=LEARNING_REPORT_INTERVAL, seed=2))
    controller = Controller(engine, Recording())  # type: ignore[arg-type]
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.grouped = grouped
    controller.run()
    assert not learning.groups and not learning.groups.templates  # every group emptied as its jobs reported
    return models, plans, most[0]


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_grouped_waiting_jobs_read_as_their_own_models(preset: str, shared_data: Path) -> None:
    """(PS jobs, two forms and loss targets: `test_learning_refresh`'s `shared` replay compares the groups with
    each waiting job's model built afresh.)"""
    fast_models, fast_plans, grouped = _replay(preset, True, shared_data)
    slow_models, slow_plans, none = _replay(preset, False, shared_data)
    assert none == 0 < 50 < grouped  # the groups served a long line (and only with the switch on)
    same_plans(fast_plans, slow_plans, least=20)
    assert len(fast_models) == len(slow_models) > 5
    for fast, slow in zip(fast_models, slow_models, strict=True):
        assert fast == slow
    assert any(m[0] == "type prior" for snap in fast_models for m in snap.values())  # priors were served


def test_jobs_join_a_group_only_with_its_model() -> None:
    """A newly published job joins its key's open group only when its model reads the same (here: GPU type
    speeds moved since the group's template); merged groups keep every job, emptied groups go."""
    book, groups = ModelBook(), ModelGroups()
    for name, fast in (("a", 1.0), ("b", 1.0), ("e", 1.0), ("c", 2.0), ("d", 2.0)):
        spec = simple_job(name, 2, job_type="t")
        model = replace(book.model(name, spec), type_speed=MappingProxyType({"v100": fast, "k80": 1.0}))
        groups.join(JobRecord(name, spec, 0.0), model)
    assert groups.group_of["a"] == groups.group_of["b"] != groups.group_of["c"] == groups.group_of["d"]
    view = groups.view({})
    assert [view[j].job_id for j in "abcde"] == list("abcde") and view["b"].type_speed["v100"] == 1.0
    assert view["d"].type_speed["v100"] == 2.0 and view.get("f") is None and len(view) == 5
    kept = groups.merge(groups.group_of["a"], groups.group_of["c"])  # (the larger, a's, stays with c's model)
    assert set(groups.group_of.values()) == {kept} == set(groups.templates) and groups.groups_of_type("t") == 1
    after = groups.view({})
    assert [after[j].type_speed["v100"] for j in "abcde"] == [2.0] * 5 and view["a"].type_speed["v100"] == 1.0
    for name in "abcde":
        groups.leave(name)
    assert not groups and not groups.templates and not groups.members and groups.groups_of_type("t") == 0


def test_same_but_id_compares_every_field_but_the_id() -> None:
    """A model differing from another in any one `JobModel` field (a field added later included) does not read
    alike: a job joins a group only with its template's model in every field."""
    base = ModelBook().model("a", simple_job("a", 2, job_type="t"))
    assert same_but_id(base, replace(base, job_id="b"))
    for name in (f.name for f in fields(JobModel) if f.name != "job_id"):
        assert not same_but_id(base, replace(base, **{name: object()})), name  # (neither `is` nor `==` the old)
