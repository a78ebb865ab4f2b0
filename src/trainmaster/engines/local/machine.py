"""This machine as a cluster: its cores, memory and GPUs, optionally split into virtual nodes.

Virtual nodes let tests and demos exercise multi-node placement and node
loss on one box. Each node owns a list of core ids; when the nodes ask for
more cores than the machine has, ids wrap around (oversubscription).
"""

from __future__ import annotations

import os
import shutil
import subprocess

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
