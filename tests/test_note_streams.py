"""Reasons noted lazily (`controller.notes`) read exactly as if every record had been written at once.

Each preset replays a contended workload three ways: with the lazy streams read
only at the end, with every record read after every decision (the daemon does
that), and with the streams replaced by the eager per-record loop they replace.
Every job's decision log and latest reason must be the same in all three.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.queue_builders import queue, queues
from tests.replay_helpers import eager

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

Logs = dict[str, tuple[str, list[tuple[float, str]]]]


def replay(workload: Workload, preset: str, how: str, monkeypatch: pytest.MonkeyPatch,
           queues: dict[str, QueueSpec] | None = None) -> Logs:
    with monkeypatch.context() as patch:
        if how == "eager":
            patch.setattr(Controller, "_note_reasons", eager)
        controller = Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), make_policy(preset),
                                queues=queues)
        if how == "read-every-decision":
            controller.after_cycle.append(lambda snap, plan: [r.decisions for r in controller.jobs.values()])
        controller.run()
        return {jid: (r.why, list(r.decisions)) for jid, r in controller.jobs.items()}


@pytest.mark.parametrize("preset", ["fifo", "drf", "tiresias", "srtf"])
def test_lazy_reasons_read_as_eager_ones(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=5)
    lazy = replay(workload, preset, "lazy", monkeypatch)
    assert sum(len(log) for _, log in lazy.values()) > 3 * len(lazy)  # jobs waited behind several heads
    assert replay(workload, preset, "eager", monkeypatch) == lazy
    assert replay(workload, preset, "read-every-decision", monkeypatch) == lazy


def test_lazy_reasons_with_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two queues: jobs of each follow their own heads (streams fork and join)."""
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=7)
    jobs = tuple(dataclasses.replace(j, spec=dataclasses.replace(j.spec, queue="a" if i % 3 else "b"))
                 for i, j in enumerate(workload.jobs))
    workload = dataclasses.replace(workload, jobs=jobs)
    two = queues(queue("a", weight=2.0), queue("b", gpu=8))
    lazy = replay(workload, "drf", "lazy", monkeypatch, two)
    assert replay(workload, "drf", "eager", monkeypatch, two) == lazy
    assert replay(workload, "drf", "read-every-decision", monkeypatch, two) == lazy
