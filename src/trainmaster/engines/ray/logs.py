"""A job's task logs read on the Ray nodes that ran them (`LogFiles` of `engines.task_logs`).

Each file is read where its task ran: through the task's own actor while it
lives, else through a reader actor (no resources) on that node, kept for the
next read. Blocks are 1 MiB (one Ray call each), so memory stays bounded
and a follow costs one small call per task per poll. A task this engine
never started (it ran under a previous daemon) and a node that is gone are
read from the run folder's shared path, which every node and the daemon see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import ray
from ray.exceptions import RayError

from trainmaster.engines.task_logs import LocalFiles

BLOCK = 1 << 20
CALL_TIMEOUT = 30.0
T = TypeVar("T")
ActorHandle = Any  # ray.actor.ActorHandle: untyped in Ray


@dataclass(frozen=True)
class LogHost:
    """Where a task's files are read: its actor (None once it ended), and a reader on its node for after."""

    actor: ActorHandle | None
    node_id: str
    log_path: str  # the task's `.log`; `.log.1` beside it


class Hosts(Protocol):
    def log_host(self, job_id: str, task: str) -> LogHost | None: ...

    def known_tasks(self, job_id: str) -> list[str]: ...

    def reader(self, node_id: str) -> ActorHandle: ...

    def forget_reader(self, node_id: str) -> None: ...


@dataclass(frozen=True)
class RayFiles:
    """One job's log files, read through Ray on the nodes that ran its tasks."""

    hosts: Hosts
    job_id: str
    shared: LocalFiles  # the job folder as the daemon sees it: the fallback

    def tasks(self) -> list[str]:
        return self.hosts.known_tasks(self.job_id) or self.shared.tasks()

    def size(self, name: str) -> int | None:
        return self._call(name, lambda actor, path: actor.file_size.remote(path), lambda: self.shared.size(name))

    def read(self, name: str, offset: int, until: int | None = None) -> Iterator[bytes]:
        end = self.size(name) if until is None else until
        while end is not None and offset < end:
            block = self._block(name, offset, min(BLOCK, end - offset))
            if not block:
                return
            offset += len(block)
            yield block

    def _block(self, name: str, offset: int, length: int) -> bytes:
        return self._call(name, lambda actor, path: actor.read_range.remote(path, offset, length),
                          lambda: b"".join(self.shared.read(name, offset, offset + length)))

    def _call(self, name: str, remote: Callable[[ActorHandle, str], Any], fallback: Callable[[], T]) -> T:
        task = name.removesuffix(".1").removesuffix(".log")
        host = self.hosts.log_host(self.job_id, task)
        if host is None:
            return fallback()
        path = host.log_path + name.removeprefix(f"{task}.log")
        for actor in ([host.actor] if host.actor is not None else []) + [None]:
            try:
                handle = actor if actor is not None else self.hosts.reader(host.node_id)
                result: T = ray.get(remote(handle, path), timeout=CALL_TIMEOUT)
                return result
            except RayError:  # the task's actor ended (killed once its process exited), or the node is gone
                if actor is None:
                    self.hosts.forget_reader(host.node_id)
        return fallback()
