"""Cost and GPU-hours, accumulated by the second as nodes come and go and jobs hold them.

Rules (the same for every engine; times on the engine's clock, in seconds):
- The cluster pays each node's `price_per_hour / 3600` for every second it is
  in the cluster, used or not (per-second billing as GCE bills; its 1-minute
  minimum is not modelled).
- A job pays, for every second it holds resources on a node, the node's price
  times its share of that node: GPUs held / node GPUs (on a node without
  GPUs: cores held / node cores). What no job holds is idle cost:
  cluster - sum of jobs.
- GPU-hours are the GPUs jobs hold, by GPU type and transient / on-demand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainmaster.core.node import Node
from trainmaster.core.resources import Resources


def share(node: Node, held: Resources) -> float:
    """The fraction of `node` a job pays for when it holds `held` there."""
    if node.capacity.gpu > 0:
        return min(1.0, held.gpu / node.capacity.gpu)
    return min(1.0, held.cpu / node.capacity.cpu) if node.capacity.cpu > 0 else 0.0


def kind(node: Node) -> str:
    """`k80 transient`, `v100 on-demand`: the key GPU-hours are summed under."""
    return f"{node.gpu_type or 'cpu'} {'transient' if node.transient else 'on-demand'}"


@dataclass
class _Holding:
    since: float
    dollars_per_s: float
    gpus: dict[str, int]  # kind -> GPUs held


@dataclass
class CostMeter:
    """Integrates price x time for the cluster and for each job (see the module doc for the rules)."""

    _nodes: dict[str, tuple[Node, float]] = field(default_factory=dict)  # name -> (node, joined at)
    _cluster: float = 0.0  # dollars of nodes that have left
    _holding: dict[str, _Holding] = field(default_factory=dict)
    job_dollars: dict[str, float] = field(default_factory=dict)  # settled up to each job's last change
    _gpu_seconds: dict[str, float] = field(default_factory=dict)
    node_seconds: dict[str, float] = field(default_factory=dict)  # kind -> seconds of nodes that have left

    def node_joined(self, node: Node, t: float) -> None:
        self._nodes.setdefault(node.name, (node, t))

    def node_left(self, name: str, t: float) -> None:
        entry = self._nodes.pop(name, None)
        if entry is not None:
            node, joined = entry
            self._cluster += node.price_per_hour / 3600 * max(0.0, t - joined)
            self.node_seconds[kind(node)] = self.node_seconds.get(kind(node), 0.0) + max(0.0, t - joined)

    def hold(self, job_id: str, per_node: Mapping[str, Resources], t: float) -> None:
        """Job `job_id` holds `per_node` from `t` on (empty: nothing); settles what it held until `t`."""
        self._settle(job_id, t)
        rate, gpus = 0.0, dict[str, int]()
        for name, res in per_node.items():
            entry = self._nodes.get(name)
            if entry is None:
                continue
            node = entry[0]
            rate += node.price_per_hour / 3600 * share(node, res)
            if res.gpu:
                gpus[kind(node)] = gpus.get(kind(node), 0) + res.gpu
        if per_node:
            self._holding[job_id] = _Holding(t, rate, gpus)
        self.job_dollars.setdefault(job_id, 0.0)

    def _settle(self, job_id: str, t: float) -> None:
        h = self._holding.pop(job_id, None)
        if h is None:
            return
        dt = max(0.0, t - h.since)
        self.job_dollars[job_id] = self.job_dollars.get(job_id, 0.0) + h.dollars_per_s * dt
        for k, n in h.gpus.items():
            self._gpu_seconds[k] = self._gpu_seconds.get(k, 0.0) + n * dt

    # -- reading (up to time t, without changing what is settled) ----------------
    def cluster_dollars(self, t: float) -> float:
        return self._cluster + sum(n.price_per_hour / 3600 * max(0.0, t - j) for n, j in self._nodes.values())

    def job_cost(self, job_id: str, t: float) -> float:
        h = self._holding.get(job_id)
        return self.job_dollars.get(job_id, 0.0) + (h.dollars_per_s * max(0.0, t - h.since) if h else 0.0)

    def gpu_hours(self, t: float) -> dict[str, float]:
        """GPU-hours jobs held, by `kind` (GPU type and transient / on-demand)."""
        out = dict(self._gpu_seconds)
        for h in self._holding.values():
            for k, n in h.gpus.items():
                out[k] = out.get(k, 0.0) + n * max(0.0, t - h.since)
        return {k: v / 3600 for k, v in sorted(out.items())}

    def node_hours(self, t: float) -> dict[str, float]:
        """Node-hours the cluster paid for, by `kind`."""
        out = dict(self.node_seconds)
        for n, j in self._nodes.values():
            out[kind(n)] = out.get(kind(n), 0.0) + max(0.0, t - j)
        return {k: v / 3600 for k, v in sorted(out.items())}
