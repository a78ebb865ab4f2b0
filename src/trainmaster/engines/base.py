"""The protocol every engine implements; the controller sees nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trainmaster.core.actions import Action
from trainmaster.core.clock import Clock
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event


class Engine(Protocol):
    @property
    def clock(self) -> Clock:
        """The clock this engine's events are stamped with."""
        ...

    def cluster(self) -> Cluster:
        """The nodes this engine runs on at the start."""
        ...

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out actions (in order). Must not block for long."""
        ...

    def wait(self, timeout: float | None) -> list[Event]:
        """Return the next events, waiting at most `timeout` seconds of this engine's clock.

        A simulated engine jumps its virtual clock to the next event (or to
        now + timeout); a real engine sleeps. With `timeout=None` and nothing
        that could ever happen, it returns [] at once.
        """
        ...

    def idle(self) -> bool:
        """True when no event can happen unless new actions arrive."""
        ...
