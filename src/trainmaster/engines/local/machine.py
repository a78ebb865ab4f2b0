"""This machine as a cluster: its cores, memory and GPUs, optionally split into virtual nodes.

Virtual nodes let tests and demos exercise multi-node placement and node
loss on one box. Each node owns a list of core ids; when the nodes ask for
more cores than the machine has, ids wrap around (oversubscription).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.cluster import Cluster
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources


def machine_cores() -> list[int]:
    """The core ids this process may run on."""
    return sorted(os.sched_getaffinity(0))


def machine_memory() -> int:
    """Total memory in bytes (from /proc/meminfo; 8 GiB when it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def machine_gpus() -> list[str]:
    """Names of the NVIDIA GPUs `nvidia-smi -L` lists (empty without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":", 1)[1].split("(")[0].strip() for line in out.splitlines() if line.startswith("GPU ")]


def _gpu_type(names: list[str]) -> str | None:
    if not names:
        return None
    return names[0].lower().replace("nvidia", "").strip().split()[0] or "gpu"


def local_cluster(nodes: int = 1, *, cpus_per_node: float | None = None, memory_per_node: int | None = None,
                  prefix: str = "local") -> Cluster:
    """This machine split into `nodes` virtual nodes (one node named `local` by default).

    Cores and GPUs are divided evenly (at least one core per node); pass
    `cpus_per_node` to oversubscribe, e.g. 2 nodes of 2 CPUs on a 2-core box.
    """
    cores = machine_cores()
    gpus = machine_gpus()
    cpu = cpus_per_node if cpus_per_node is not None else max(1, len(cores) // nodes)
    mem = memory_per_node if memory_per_node is not None else machine_memory() // nodes
    gpu = len(gpus) // nodes
    names = [prefix] if nodes == 1 else [f"{prefix}-{i}" for i in range(nodes)]
    return Cluster(tuple(
        Node(name=name, capacity=Resources(cpu=round(cpu * 1000), memory=mem, gpu=gpu),
             gpu_type=_gpu_type(gpus) if gpu else None)
        for name in names
    ))


class LedgerError(RuntimeError):
    """The engine asked the ledger for more than a node has free: a bug, never a user's input."""


@dataclass
class Ledger:
    """What each virtual node's live task processes hold: resources, core ids and GPU indices.

    The engine's own book of the machine, apart from the controller's plan: a
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
    core_load: dict[int, int] = field(default_factory=dict)
    gpu_busy: set[int] = field(default_factory=set)
    journal: Path | None = None

    @classmethod
    def for_cluster(cls, cluster: Cluster, journal: Path | None = None) -> Ledger:
        machine = machine_cores()
        cores: dict[str, list[int]] = {}
        gpus: dict[str, list[int]] = {}
        next_core = next_gpu = 0
        for node in cluster.nodes:
            count = max(1, -(-node.capacity.cpu // 1000))
            cores[node.name] = [machine[(next_core + k) % len(machine)] for k in range(count)]
            next_core += count
            gpus[node.name] = list(range(next_gpu, next_gpu + node.capacity.gpu))
            next_gpu += node.capacity.gpu
        ledger = cls(capacity={n.name: n.capacity for n in cluster.nodes}, cores=cores, gpus=gpus,
                     core_load={c: 0 for c in machine}, journal=journal)
        ledger._write({"op": "reset", "nodes": {n: {"cpu": r.cpu, "memory": r.memory, "gpus": gpus[n]}
                                                 for n, r in ledger.capacity.items()}})
        return ledger

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
        free = [g for g in self.gpus[node] if g not in self.gpu_busy][:need.gpu]
        if len(free) < need.gpu:
            raise LedgerError(f"node {node}: {need.gpu} GPU(s) asked for, {len(free)} free")
        want = min(len(self.cores[node]), max(1, -(-need.cpu // 1000)))
        order = sorted(self.cores[node], key=lambda c: (self.core_load.get(c, 0), c))
        chosen = sorted(dict.fromkeys(order[:want]))
        for c in chosen:
            self.core_load[c] = self.core_load.get(c, 0) + 1
        self.gpu_busy.update(free)
        self.in_use[node] = self.in_use.get(node, Resources()) + need
        self._write({"op": "take", "node": node, "task": task, "cpu": need.cpu, "memory": need.memory,
                     "gpus": free})
        return chosen, free

    def give_back(self, node: str, need: Resources, cores: list[int], gpus: list[int], task: str) -> None:
        for c in cores:
            self.core_load[c] = max(0, self.core_load.get(c, 0) - 1)
        self.gpu_busy.difference_update(gpus)
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
