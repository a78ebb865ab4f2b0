"""The chief (rank 0) of a gang that holds on-demand and transient nodes runs on the on-demand one."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from builders import job, node
from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.clock import ManualClock
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec, Role
from trainmaster.engines.base import Recovered
from trainmaster.engines.gang import Attempt, GangEngine, RunningTask, TaskLaunch


class _NoProgress:
    def read(self) -> list[dict[str, object]]:
        return []


@dataclass
class _Task:
    launch: TaskLaunch

    @property
    def pid(self) -> int:
        return 0

    @property
    def where(self) -> str:
        return "nowhere"

    def poll(self) -> int | None:
        return None

    def signal(self, sig: signal.Signals) -> None:
        pass

    def reap(self) -> None:
        pass


@dataclass
class _Recorder:
    """A runner that starts nothing and remembers what it was asked to start."""

    launches: list[TaskLaunch] = field(default_factory=list)
    chiefs: list[str] = field(default_factory=list)

    def cannot_start(self, spec: JobSpec) -> str | None:
        return None

    def command(self, spec: JobSpec) -> tuple[str, ...]:
        return ("true",)

    def begin(self, job_id: str, attempt: int, workers: Sequence[str], servers: Sequence[str]) -> Attempt:
        self.chiefs.append(workers[0])
        return Attempt(env={}, chief_env={}, progress=_NoProgress())

    def start(self, launch: TaskLaunch) -> RunningTask:
        self.launches.append(launch)
        return _Task(launch)

    def tick(self, live: Sequence[RunningTask], starting: bool) -> None:
        pass

    def last_attempt(self, job_id: str) -> int:
        return 0

    def recover(self) -> Mapping[str, Recovered]:
        return {}

    def close(self) -> None:
        pass


def test_rank_zero_lands_on_the_on_demand_node() -> None:
    # "a-spot" sorts before "b-od": in allocation order the first worker would be on the transient node.
    cl = Cluster((node("a-spot", 2, cpu=4, transient=True), node("b-od", 2, cpu=4)))
    runner = _Recorder()
    engine = GangEngine(cl, runner, clock=ManualClock(0.0))
    spec = job("j", 3)
    alloc = Allocation.of([Placement(Role.WORKER, "a-spot"), Placement(Role.WORKER, "a-spot"),
                           Placement(Role.WORKER, "b-od")])
    engine.apply([Action(ActionKind.START, "j", spec, alloc)])
    engine.wait(0.0)
    ranks = {launch.env["RANK"]: launch.node for launch in runner.launches}
    assert runner.chiefs == ["b-od"] and ranks["0"] == "b-od"
    assert sorted(ranks) == ["0", "1", "2"]
