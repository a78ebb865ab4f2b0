"""A Ray cluster of several nodes on this machine, loopback only: for `make demo-ray`, tests and benchmarks.

Each node is a real raylet (`ray.cluster_utils.Cluster`) named by its
`trainmaster.io/node` label (`n0` the head, `n1`, ...). Token auth is off
(nothing listens beyond 127.0.0.1) unless `RAY_AUTH_MODE` says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainmaster.engines.ray.connect import keep_loopback


def node_args(name: str, cpus: int = 2) -> dict[str, Any]:
    """`Cluster.add_node` arguments for a loopback node named `name`."""
    return {"num_cpus": cpus, "node_ip_address": "127.0.0.1", "labels": {"trainmaster.io/node": name},
            "object_store_memory": 80 * 2**20}


@contextmanager
def local_ray_cluster(nodes: int = 3, cpus: int = 2) -> Iterator[Any]:
    """Start `nodes` Ray nodes here; yields the `ray.cluster_utils.Cluster` (its `.address` to connect)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    keep_loopback()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**node_args("n0", cpus), "include_dashboard": False})
    try:
        for i in range(1, nodes):
            cluster.add_node(**node_args(f"n{i}", cpus))
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()  # type: ignore[no-untyped-call]
        cluster.shutdown()  # type: ignore[no-untyped-call]
