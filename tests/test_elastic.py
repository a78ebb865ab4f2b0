"""Elastic jobs (EDL): start at min, grow least-fulfilled first up to the load line, shrink for others."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, pending, running, snapshot
from queue_builders import J, simulate
from trainmaster.core.job import JobKind, Role
from trainmaster.models.book import JobModel
from trainmaster.models.speed import Config, Form, LinearScaling
from trainmaster.policies.elastic import fulfillment, grow_into_idle
from trainmaster.policies.registry import make_policy
from trainmaster.policies.trainmaster import build
from trainmaster.policies.workspace import Workspace


def held(run, name: str) -> int:  # type: ignore[no-untyped-def]
    rec = run.record(name)
    return int(rec.allocation.gpus(rec.spec))


def test_fulfillment_is_cur_minus_min_over_max_minus_min() -> None:
    view = running("a", 3, min_gpus=1, max_gpus=5)
    assert fulfillment(view, {Role.WORKER: 3}) == 0.5
    assert fulfillment(running("b", 2), {Role.WORKER: 2}) == 1.0  # not elastic: counts as full


def test_an_elastic_job_grows_up_to_the_load_line() -> None:
    run = simulate("1x8", make_policy("edl"), J("a", 2, max_gpus=8, duration=10_000), until=100)
    assert held(run, "a") == 7  # 0.97 * 8 = 7.76: the eighth GPU would cross the load line
    run = simulate("1x8", build("t", load_line=1.0), J("a", 2, max_gpus=8, duration=10_000), until=100)
    assert held(run, "a") == 8


def test_growth_goes_to_the_least_fulfilled_job_first() -> None:
    jobs = (J("a", 1, max_gpus=4, duration=10_000), J("b", 1, max_gpus=8, duration=10_000))
    run = simulate("1x8", build("t", load_line=1.0), *jobs, until=100)
    # one at a time to the lower (cur-min)/(max-min): a 1->2, b 1->2->3->4, a ->3, b ->5 (ties by submit time)
    assert (held(run, "a"), held(run, "b")) == (3, 5)


def test_elastic_jobs_shrink_toward_min_for_a_pending_job() -> None:
    jobs = (J("a", 2, max_gpus=8, duration=10_000), J("b", 4, at=100, duration=500))
    run = simulate("1x8", build("t", load_line=1.0), *jobs, until=200)
    assert run.starts()["b"] == 100
    assert held(run, "a") == 4 and held(run, "b") == 4
    assert run.events("preempted") == []  # shrunk, not stopped


def test_a_service_takes_room_from_elastic_jobs_at_once() -> None:
    service = {"kind": JobKind.SERVICE, "priority": 100}
    jobs = (J("train", 2, max_gpus=8, duration=10_000), J("web", 5, at=100, duration=500, fields=service))
    run = simulate("1x8", make_policy("edl"), *jobs, until=200)
    # 7 -> 3 makes room for the service; 3 -> 2 (its min) brings the load back under the line (7 of 8 GPUs)
    assert run.starts()["web"] == 100 and held(run, "train") == 2
    assert run.events("preempted") == []
    run = simulate("1x8", make_policy("edl"), *jobs, until=700)  # the service left: training grows back
    assert held(run, "train") == 7


def test_shrink_never_goes_below_min_and_is_skipped_when_it_cannot_help() -> None:
    policy = build("t", load_line=1.0)
    snap = snapshot(cluster(1, 8), running("a", 6, min_gpus=4, max_gpus=8), pending("b", 6, submit=1))
    sizes = policy.size(snap, policy.order(snap), Workspace(snap))
    assert sizes["a"][Role.WORKER] == 6  # b needs 6, shrinking a to its min 4 frees only 4 in all: keep a


def _model(job_id: str, cap: int) -> JobModel:
    """A real fitted-model record whose speed is linear up to `cap` workers and flat beyond (Optimus' prior)."""
    speed = LinearScaling(ref=Config(workers=1), ref_speed=1.0, cap=cap)
    return JobModel(job_id=job_id, form=Form.ALLREDUCE, batch=1.0, speed=speed, basis="linear scaling", step=0.0,
                    remaining=10_000.0, configs=1)


def test_with_models_growth_follows_marginal_gain_and_stops_where_it_pays_nothing() -> None:
    snap = snapshot(cluster(1, 8), running("a", 1, min_gpus=1, max_gpus=8), running("b", 1, min_gpus=1, max_gpus=8,
                                                                                      submit=1.0))
    snap = replace(snap, models={"a": _model("a", cap=2), "b": _model("b", cap=8)})
    ws = Workspace(snap)
    grow_into_idle(1.0, use_models=True)(snap, [], ws)
    assert (ws.allocations["a"].count(Role.WORKER), ws.allocations["b"].count(Role.WORKER)) == (2, 6)
    ws = Workspace(snap)  # without models: least fulfillment splits the room evenly
    grow_into_idle(1.0)(snap, [], ws)
    assert (ws.allocations["a"].count(Role.WORKER), ws.allocations["b"].count(Role.WORKER)) == (4, 4)


def test_the_trainmaster_preset_learns_models_online() -> None:
    run = simulate("1x4", make_policy("trainmaster"), J("a", 1, max_gpus=4, duration=1000), until=10)
    assert "a" in run.controller.models
