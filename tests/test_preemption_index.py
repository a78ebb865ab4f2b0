"""The victim index in preemption is only a shortcut: plans match those of a full scan over every holder."""

from __future__ import annotations

import random

import pytest

from queue_builders import J, queue, queues, simulate
from trainmaster.core.job import JobKind
from trainmaster.policies import preemption
from trainmaster.policies.trainmaster import build


def _mixed_jobs(seed: int) -> list[J]:
    """Jobs over three queues with mixed priorities, a few services, arriving while the cluster is full."""
    rng = random.Random(seed)
    jobs = []
    for i in range(40):
        fields: dict[str, object] = {"queue": rng.choice("abc"), "priority": rng.randrange(4),
                                     "checkpoint_every": rng.choice((0.0, 300.0))}
        if rng.random() < 0.1:
            fields.update(kind=JobKind.SERVICE)  # any priority: a service evicts higher-priority training too
        jobs.append(J(f"j{i}", rng.choice((1, 2, 4)), at=rng.uniform(0, 3000), duration=rng.uniform(200, 2500),
                      max_gpus=rng.choice((None, 8)), fields=fields))
    return jobs


def _history(policy_name: str, seed: int, victim_index: bool = True,
             queued: bool = True) -> list[tuple[float, str, str, int]]:
    qs = queues(queue("a", gpu=8), queue("b", gpu=4), queue("c", gpu=4, borrowing=False)) if queued else None
    if policy_name == "edl":  # edl's own settings (policies/edl.py), with the index on or off
        policy = build("edl", backfill="greedy", elastic=True, preemption=True, victim_index=victim_index)
    else:
        policy = build("t", min_runtime=300.0, interval=100.0, victim_index=victim_index)
    run = simulate("2x8", policy, *_mixed_jobs(seed), qs=qs)
    decisions = [(0.0, "why", r.id, len(r.decisions)) for r in run.controller.jobs.values()]
    return run.log + decisions + [(0.0, text, jid, 0) for jid, r in run.controller.jobs.items()
                                  for _, text in r.decisions]


@pytest.mark.parametrize("policy_name", ["edl", "trainmaster"])
@pytest.mark.parametrize("seed", [0, 4, 12])
def test_indexed_victim_search_plans_like_a_full_scan(policy_name: str, seed: int) -> None:
    indexed = _history(policy_name, seed)
    assert any(what == "preempted" for _, what, _, _ in indexed)  # the scenario does exercise preemption
    assert _history(policy_name, seed, victim_index=False) == indexed


@pytest.mark.parametrize("policy_name", ["edl", "trainmaster"])
@pytest.mark.parametrize("seed", [0, 4, 12])
def test_one_queue_victim_answers_plan_like_a_full_scan(policy_name: str, seed: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without queue definitions every holder is in one queue: whether a claimant has anybody to evict is
    remembered per (index version, kind, priority) (`_Holders.any`); plans match a full scan's."""
    calls = []
    groups = preemption._Holders._groups
    monkeypatch.setattr(preemption._Holders, "_groups", lambda self, *a: calls.append(1) or groups(self, *a))
    asked = []
    answer = preemption._Holders.any
    monkeypatch.setattr(preemption._Holders, "any", lambda self, *a: asked.append(1) or answer(self, *a))
    indexed = _history(policy_name, seed, queued=False)
    assert any(what == "preempted" for _, what, _, _ in indexed)  # priority preemption within the one queue
    assert len(calls) < len(asked)  # some answers were remembered
    assert _history(policy_name, seed, victim_index=False, queued=False) == indexed
