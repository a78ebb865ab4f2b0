"""Checkpoint interval from the revocation rate (Young/Daly) for jobs that leave `checkpoint.every` open.

Young (1974) and Daly (2006): with a checkpoint costing `C` seconds and failures
arriving at a mean time between failures `M`, the interval that minimizes the
expected time lost (checkpoints written plus work redone) is about
`sqrt(2 * C * M)`; Daly's higher-order terms matter only when `C` nears `M`.

`M` for a job is the mean time between revocations of the transient nodes it
holds: a node's mean lifetime, estimated as the transient node-seconds observed
over the revocations seen (the maximum-likelihood rate of an exponential), over
the number of transient nodes the job holds. Until the first revocation the
estimate is unknown and the job keeps its default interval. `C` defaults to 30 s
(a ResNet-size checkpoint to networked storage; `CHECKPOINT_COST_S`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainmaster.core.job import JobSpec
from trainmaster.core.node import Node

CHECKPOINT_COST_S = 30.0
BOUNDS_S = (10.0, 24 * 3600.0)  # never checkpoint more often than every 10 s, nor less than daily


def young_daly(cost: float, mtbf: float) -> float:
    """The checkpoint interval `sqrt(2 * cost * mtbf)` (seconds)."""
    return math.sqrt(2.0 * cost * mtbf)


@dataclass
class RevocationRate:
    """Transient node-seconds observed and revocations seen: a node's mean lifetime on this market."""

    exposure: float = 0.0  # transient node-seconds up to `since`
    revocations: int = 0
    transient: int = 0  # transient nodes up now
    since: float = 0.0

    def _advance(self, now: float) -> None:
        if now > self.since:
            self.exposure += self.transient * (now - self.since)
            self.since = now

    def joined(self, node: Node, now: float) -> None:
        self._advance(now)
        if node.transient:
            self.transient += 1

    def left(self, node: Node, now: float) -> None:
        """A node is gone: a transient node's loss counts as a revocation."""
        self._advance(now)
        if node.transient:
            self.transient = max(0, self.transient - 1)
            self.revocations += 1

    def node_mtbf(self, now: float) -> float | None:
        """Mean seconds a transient node lives, or None before the first revocation."""
        if not self.revocations:
            return None
        exposure = self.exposure + self.transient * max(0.0, now - self.since)
        return exposure / self.revocations


def checkpoint_interval(spec: JobSpec, transient_nodes: int, rate: RevocationRate, now: float,
                        cost: float = CHECKPOINT_COST_S) -> float:
    """The job's checkpoint interval on an allocation holding `transient_nodes` transient nodes."""
    mtbf = rate.node_mtbf(now)
    if not spec.checkpoint_auto or transient_nodes <= 0 or mtbf is None:
        return spec.checkpoint_every
    return min(max(young_daly(cost, mtbf / transient_nodes), BOUNDS_S[0]), BOUNDS_S[1])
