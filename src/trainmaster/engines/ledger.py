"""The engine's own book of what each node's live tasks hold: resources, core ids, GPU indices."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.cluster import Cluster
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources


class LedgerError(RuntimeError):
    """The engine asked the ledger for more than a node has free: a bug, never a user's input."""


@dataclass
class Ledger:
    """What each node's live task processes hold: resources, core ids and GPU indices.

    The engine's own book of its nodes, apart from the controller's plan: a
    stopping task holds its share until its process is gone (Volcano's
    `Releasing`), so a launch waits for `fits` instead of double-booking. GPUs
    are exclusive and `take` never hands out fewer than asked: it raises. With
    a `journal`, every take and give-back is appended as a JSON line, so a test
    can check from outside that no GPU or core share was ever held twice.
    """

    capacity: dict[str, Resources]
    cores: dict[str, list[int]]
    gpus: dict[str, list[int]]
    in_use: dict[str, Resources] = field(default_factory=dict)
    core_load: dict[tuple[str, int], int] = field(default_factory=dict)  # (node or "" if shared, core) -> tasks
    gpu_busy: dict[str, set[int]] = field(default_factory=dict)  # node -> GPU indices held
    journal: Path | None = None
    machine: list[int] | None = None  # core ids shared by every node (virtual nodes of one machine), else per node

    @classmethod
    def for_cluster(cls, cluster: Cluster, journal: Path | None = None, machine: list[int] | None = None) -> Ledger:
        """A ledger for `cluster`. With `machine`, the nodes are virtual nodes of one machine: they share its
        core ids (wrapping around when oversubscribed) and number GPUs machine-wide; else each node owns
        cores 0..n-1 and GPUs 0..g-1 of its own."""
        ledger = cls(capacity={}, cores={}, gpus={}, machine=machine, journal=journal)
        for node in cluster.nodes:
            ledger._add(node)
        ledger._write({"op": "reset", "nodes": {n: {"cpu": r.cpu, "memory": r.memory, "gpus": ledger.gpus[n]}
                                                 for n, r in ledger.capacity.items()}})
        return ledger

    def add_node(self, node: Node) -> None:
        self._add(node)
        self._write({"op": "add", "node": node.name, "cpu": node.capacity.cpu, "memory": node.capacity.memory,
                     "gpus": self.gpus[node.name]})

    def _add(self, node: Node) -> None:
        count = max(1, -(-node.capacity.cpu // 1000))
        if self.machine:
            used = sum(len(c) for c in self.cores.values())
            self.cores[node.name] = [self.machine[(used + k) % len(self.machine)] for k in range(count)]
            first = sum(len(g) for g in self.gpus.values())
        else:
            self.cores[node.name] = list(range(count))
            first = 0
        self.gpus[node.name] = list(range(first, first + node.capacity.gpu))
        self.capacity[node.name] = node.capacity
        self.in_use.setdefault(node.name, Resources())

    def fits(self, node: str, need: Resources) -> bool:
        """Whether `need` fits beside what the node's live tasks hold now."""
        if node not in self.capacity:
            return False
        return (self.in_use.get(node, Resources()) + need).fits_in(self.capacity[node])

    def take(self, node: str, need: Resources, task: str) -> tuple[list[int], list[int]]:
        """Book `need` on `node` for `task`: the least-loaded cores and `need.gpu` free GPUs, or raise."""
        if not self.fits(node, need):
            raise LedgerError(f"node {node}: {need} does not fit beside {self.in_use.get(node, Resources())} "
                              f"of {self.capacity.get(node)}")
        busy = self.gpu_busy.get(node, set())
        free = [g for g in self.gpus[node] if g not in busy][:need.gpu]
        if len(free) < need.gpu:
            raise LedgerError(f"node {node}: {need.gpu} GPU(s) asked for, {len(free)} free")
        want = min(len(self.cores[node]), max(1, -(-need.cpu // 1000)))
        owner = "" if self.machine else node
        order = sorted(self.cores[node], key=lambda c: (self.core_load.get((owner, c), 0), c))
        chosen = sorted(dict.fromkeys(order[:want]))
        for c in chosen:
            self.core_load[owner, c] = self.core_load.get((owner, c), 0) + 1
        busy.update(free)
        self.gpu_busy[node] = busy
        self.in_use[node] = self.in_use.get(node, Resources()) + need
        self._write({"op": "take", "node": node, "task": task, "cpu": need.cpu, "memory": need.memory,
                     "gpus": free})
        return chosen, free

    def give_back(self, node: str, need: Resources, cores: list[int], gpus: list[int], task: str) -> None:
        for c in cores:
            key = ("" if self.machine else node, c)
            self.core_load[key] = max(0, self.core_load.get(key, 0) - 1)
        self.gpu_busy.get(node, set()).difference_update(gpus)
        self.in_use[node] = self.in_use.get(node, Resources()) - need
        self._write({"op": "give", "node": node, "task": task, "cpu": need.cpu, "memory": need.memory,
                     "gpus": gpus})

    def mark(self, what: str, **detail: object) -> None:
        """Note a point in the journal (e.g. that a dead predecessor's tasks are gone)."""
        self._write({"op": what, **detail})

    def _write(self, entry: dict[str, object]) -> None:
        if self.journal is not None:
            with open(self.journal, "a") as f:
                f.write(json.dumps({"t": time.time(), **entry}) + "\n")
