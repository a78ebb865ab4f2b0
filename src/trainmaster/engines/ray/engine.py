"""The `ray` engine: the shared gang lifecycle (`engines/gang.py`) with every task a Ray actor (`runner.py`).

The cluster is read from Ray's alive nodes (`nodes.py`) and re-read every
`node_poll` seconds: a node that joins becomes `NodeAdded`, one that leaves
(its raylet died, `Cluster.remove_node`, a spot machine revoked) becomes
`NodeLost`, and the tasks it ran are gone with it; the gang engine kills the
rest of each gang and the controller restarts the job from its checkpoint.
Each node owns its own core and GPU ids (the ledger with `machine=None`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from trainmaster.core.clock import Clock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event
from trainmaster.engines.gang import GangEngine
from trainmaster.engines.ray.connect import connect
from trainmaster.engines.ray.nodes import RayNode, alive_nodes
from trainmaster.engines.task_logs import stream_logs


def ray_nodes() -> dict[str, RayNode]:
    import ray

    return alive_nodes(ray.nodes())  # type: ignore[no-untyped-call]


class RayEngine(GangEngine):
    """Runs jobs as Ray actors across a Ray cluster's nodes (see the module docstring)."""

    def __init__(self, *, run_dir: Path, address: str | None = None, namespace: str = "trainmaster",
                 base_dir: Path | None = None, clock: Clock | None = None, grace: float = 20.0,
                 poll_interval: float = 0.05, silent_running_after: float = 30.0, place_timeout: float = 60.0,
                 node_poll: float = 1.0, ledger_journal: Path | None = None) -> None:
        connect(address, namespace)
        from trainmaster.engines.ray.runner import RayRunner  # imports ray: only once connected

        nodes = ray_nodes()
        if not nodes:
            raise ConnectionError(f"the Ray cluster at {address or 'auto'} has no alive node")
        self.ray = RayRunner(run_dir, dict(nodes), base_dir=base_dir or Path.cwd(), namespace=namespace,
                             place_timeout=place_timeout)
        self.run_dir = self.ray.run_dir
        self.node_poll = node_poll
        self._next_sync = time.monotonic() + node_poll
        super().__init__(Cluster(tuple(n.node for n in nodes.values())), self.ray, clock=clock, grace=grace,
                         poll_interval=poll_interval, silent_running_after=silent_running_after,
                         ledger_journal=ledger_journal, machine=None)

    def job_dir(self, job_id: str) -> Path:
        return self.ray.job_dir(job_id)

    def node_id(self, name: str) -> str:
        """Ray's id of the node `name`."""
        return self.ray.nodes[name].node_id

    def log_tasks(self, job_id: str) -> list[str]:
        return self.ray.log_files(job_id).tasks()

    def logs(self, job_id: str, task: str | None = None, *, follow: bool = False, tail: int | None = None,
             done: Callable[[], bool] | None = None, poll: float = 0.25) -> Iterator[str]:
        """Task logs read on whatever node each task ran, through Ray (see `engines/ray/logs.py`)."""
        return stream_logs(self.ray.log_files(job_id), task, tail=tail, follow=follow,
                           done=done or (lambda: not self.tasks(job_id)), poll=poll)

    def sync_nodes(self) -> None:
        """Compare Ray's alive nodes with ours: joins become `NodeAdded`, departures `NodeLost`."""
        self._next_sync = time.monotonic() + self.node_poll
        now = ray_nodes()
        for name, found in now.items():
            if name not in self.cluster() or name in self.revoked:
                self.ray.nodes[name] = found
                self.revoked.discard(name)
                if name in self.cluster():  # back after a loss: the gang engine knows it already
                    continue
                self.add_node(found.node)
        for name in [n.name for n in self.cluster().nodes]:
            if name not in now and name not in self.revoked:
                self.ray.nodes.pop(name, None)
                self.remove_node(name)

    def _poll(self) -> list[Event]:
        if time.monotonic() >= self._next_sync:
            self.sync_nodes()
        return super()._poll()
