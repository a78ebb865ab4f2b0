"""Queues: YAML, unknown queues, quotas (per resource, GPU type, parent), fair share, borrow and reclaim."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_builders import J, gpus_by_queue, queue, queues, simulate
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.core.queue import load_queues, queues_from_mapping
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.trainmaster import build


def q(name: str, **fields: object) -> dict[str, object]:
    return {"name": name, **fields}


# -- YAML -------------------------------------------------------------------------
def test_queue_yaml_parses_every_field(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text("""
queues:
  - {name: org, quota: {gpu: 16}, borrowing: false}
  - name: research
    weight: 2
    quota: {gpu: 8, cpu: 96, memory: 384Gi}
    gpuTypes: {v100: 4}
    parent: org
    priority: 10
""")
    qs = load_queues(path)
    assert list(qs) == ["org", "research"]
    r = qs["research"]
    assert (r.weight, r.parent, r.priority, r.borrowing) == (2.0, "org", 10, True)
    assert r.quota == Resources(cpu=96_000, memory=384 * 2**30, gpu=8)
    assert qs["org"].quota_text() == "gpu=16"
    assert r.gpu_type_quota("v100") == 4 and r.gpu_type_quota("k80") is None
    assert qs["org"].borrowing is False


@pytest.mark.parametrize(("doc", "field", "words"), [
    ([q("a", wieght=2)], "queues[0].wieght", "unknown field"),
    ([q("a", weight=0)], "queues[0].weight", "must be between 1e-06 and 1000000"),
    ([q("a", weight="x")], "queues[0].weight", "valid number"),
    ([q("a"), q("a")], "queues[1].name", "duplicate"),
    ([q("a", parent="nope")], "queues.a.parent", "unknown queue"),
    ([q("a", parent="b"), q("b", parent="a")], "parent", "cycle"),
    ([q("p", quota={"gpu": 4}), q("c", parent="p", quota={"gpu": 8})], "queues.c.quota", "more than its parent"),
    ([q("a", quota={"gpus": 4})], "queues[0].quota.gpus", "unknown resource"),
    ([q("a", gpuTypes={"v100": -1})], "queues[0].gpuTypes.v100", "whole number"),
    ([q("a", borrowing="yes")], "queues[0].borrowing", "true or false"),
    ([{"weight": 1}], "queues[0].name", "is required"),
    ([], "queues", "missing or not a list"),
])
def test_queue_yaml_errors_name_the_field(doc: list[object], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        queues_from_mapping({"queues": doc})
    assert field in err.value.field and words in str(err.value)


def test_missing_queue_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_queues(tmp_path / "absent.yaml")


# -- admission ----------------------------------------------------------------------
def test_unknown_queue_is_rejected_with_the_known_names() -> None:
    run = simulate("1x4", build("t"), J("a", 1, fields={"queue": "nope"}), J("b", 1, fields={"queue": "research"}),
                   qs=queues(queue("research")))
    a = run.record("a")
    assert a.state is JobState.REJECTED and "unknown queue 'nope'" in a.message and "research" in a.message
    assert run.record("b").state is JobState.SUCCEEDED


def test_non_borrowing_quota_caps_a_queue_even_on_an_idle_cluster() -> None:
    jobs = [J(f"a{i}", 2, duration=100, fields={"queue": "a"}) for i in range(3)]
    run = simulate("2x4", build("t"), *jobs, qs=queues(queue("a", gpu=4, borrowing=False)), until=50)
    assert gpus_by_queue(run.controller) == {"a": 4}
    waiting = [r for r in run.controller.live.values() if r.state is JobState.PENDING]
    assert len(waiting) == 1 and waiting[0].why.startswith("quota:")


def test_job_above_a_non_borrowing_quota_is_rejected_as_never() -> None:
    run = simulate("2x4", build("t"), J("big", 6, fields={"queue": "a"}), qs=queues(queue("a", gpu=4, borrowing=False)))
    assert run.record("big").state is JobState.REJECTED and "quota" in run.record("big").message


def test_parent_quota_caps_its_children_together() -> None:
    qs = queues(queue("org", gpu=4, borrowing=False), queue("x", parent="org"), queue("y", parent="org"))
    jobs = [J(f"{n}{i}", 1, duration=100, fields={"queue": n}) for n in "xy" for i in range(4)]
    run = simulate("2x4", build("t"), *jobs, qs=qs, until=50)
    used = gpus_by_queue(run.controller)
    assert used["x"] + used["y"] == 4
    assert used == {"x": 2, "y": 2}  # fair share between equal-weight siblings


def test_gpu_type_quota_limits_that_type_only() -> None:
    cl = parse_shorthand("1x4:v100+1x4:k80")
    qs = queues_from_mapping([{"name": "a", "gpuTypes": {"v100": 2}, "borrowing": False}])
    jobs = [J(f"v{i}", 1, duration=100, fields={"queue": "a", "gpu_types": ("v100",)}) for i in range(4)]
    jobs += [J(f"k{i}", 1, duration=100, fields={"queue": "a", "gpu_types": ("k80",)}) for i in range(4)]
    run = simulate(cl, build("t"), *jobs, qs=qs, until=50)
    running = {r.id for r in run.controller.live.values() if r.state.active}
    assert sum(1 for r in running if r.startswith("v")) == 2
    assert sum(1 for r in running if r.startswith("k")) == 4


# -- fair share ----------------------------------------------------------------------
def test_weights_two_to_one_split_a_contended_cluster() -> None:
    qs = queues(queue("a", weight=2), queue("b", weight=1))
    jobs = [J(f"{n}{i}", 1, duration=100, fields={"queue": n}) for n in "ab" for i in range(20)]
    run = simulate("1x6", build("t", elastic=False), *jobs, qs=qs, until=250)
    assert gpus_by_queue(run.controller) == {"a": 4, "b": 2}


def test_hierarchy_compares_parents_before_children() -> None:
    # org1 (weight 1) has two children, org2 (weight 1) one: each org gets half, not each leaf a third.
    qs = queues(queue("org1"), queue("org2"), queue("x", parent="org1"), queue("y", parent="org1"),
                queue("z", parent="org2"))
    jobs = [J(f"{n}{i}", 1, duration=100, fields={"queue": n}) for n in "xyz" for i in range(10)]
    run = simulate("1x4", build("t", elastic=False), *jobs, qs=qs, until=50)
    used = gpus_by_queue(run.controller)
    assert used["z"] == 2 and used["x"] + used["y"] == 2


# -- borrow and reclaim ------------------------------------------------------------------
def test_idle_quota_is_borrowed_then_reclaimed() -> None:
    qs = queues(queue("a", gpu=4), queue("b", gpu=4))
    jobs = [J(f"a{i}", 2, at=0, duration=5000, fields={"queue": "a"}) for i in range(4)]
    jobs += [J(f"b{i}", 2, at=1000, duration=500, fields={"queue": "b"}) for i in range(2)]
    run = simulate("2x4", build("t", elastic=False, min_runtime=600), *jobs, qs=qs)
    # a borrowed b's idle quota: all four of its jobs ran at once.
    assert all(run.starts()[f"a{i}"] == 0 for i in range(4))
    # b reclaimed exactly its quota at once: two of a's jobs were preempted, the others kept running.
    assert run.starts()["b0"] == run.starts()["b1"] == 1000
    preempted = {j for t, j in run.events("preempted")}
    assert len(preempted) == 2 and preempted <= {f"a{i}" for i in range(4)}
    for jid in preempted:  # resumed from the checkpoint, restart counted, finished once b was done
        rec = run.record(jid)
        assert rec.preemptions == 1 and rec.state is JobState.SUCCEEDED
        assert rec.finish_time == pytest.approx(1500 + 4000)
