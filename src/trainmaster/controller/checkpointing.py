"""The controller's side of Young/Daly checkpointing: learn the revocation rate, set the interval at launch.

Every start, resize or restart of a job that left `checkpoint.every` open goes
to the engine with the interval `models.checkpointing.checkpoint_interval`
gives for the transient nodes of its new allocation (the engine passes it to
the tasks as `TM_CHECKPOINT_EVERY`; the simulator checkpoints on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.cluster import Cluster
from trainmaster.core.node import Node
from trainmaster.models.checkpointing import RevocationRate, checkpoint_interval


class CheckpointTuner:
    """Watches nodes come and go; rewrites the launch actions of jobs with an open checkpoint interval."""

    def __init__(self, cluster: Cluster, now: float = 0.0) -> None:
        self.rate = RevocationRate(since=now)
        for node in cluster.nodes:
            self.rate.joined(node, now)

    def joined(self, node: Node, now: float) -> None:
        self.rate.joined(node, now)

    def lost(self, node: Node, now: float) -> None:
        self.rate.left(node, now)

    def tune(self, actions: Sequence[Action], cluster: Cluster, now: float) -> list[Action]:
        out = list(actions)
        for i, action in enumerate(out):
            spec = action.spec
            if not spec.checkpoint_auto or action.kind is ActionKind.STOP:
                continue
            transient = sum(1 for n in action.allocation.nodes if n in cluster and cluster.node(n).transient)
            every = checkpoint_interval(spec, transient, self.rate, now)
            if every != spec.checkpoint_every:
                out[i] = replace(action, spec=replace(spec, checkpoint_every=every))
        return out
