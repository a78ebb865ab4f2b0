"""When nodes join and leave a real engine: boots, market revocations (notice, then loss), replacements.

The simulator schedules these on its virtual clock; a real engine (local,
Ray) keeps this agenda on its own clock and acts on what is due at each poll.
A transient node's revocation comes from the `Market` when the node joins
(a fitted hazard, or an availability trace replayed from the engine's start),
so the same market file drives a simulated and a real run.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from trainmaster.core.market import Market, trace_type
from trainmaster.core.node import Node


class Due(Enum):
    JOIN = "join"  # a booted node joins
    NOTICE = "notice"  # the market warns: this node goes at `lost_at`
    LOSS = "loss"  # the market takes the node
    AVAILABILITY = "availability"  # internal: an availability-trace row takes effect


@dataclass(frozen=True, slots=True)
class Change:
    kind: Due
    node: Node
    lost_at: float = 0.0  # NOTICE: when the loss comes
    reason: str = "revoked"


_Entry = tuple[float, int, Change | int]  # (time, sequence, a change or an availability row's index)


@dataclass
class Churn:
    """An agenda of node changes on one clock; `due(now, alive)` hands out what has come due, in time order.

    `replace_delay`: a revoked node comes back as a fresh node of its kind that
    many seconds after the loss (what a managed instance group does); None: never.
    """

    market: Market | None = None
    replace_delay: float | None = None
    revocations: list[tuple[float, str, str]] = field(default_factory=list)  # (lost at, node, reason)
    _agenda: list[_Entry] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _booting: dict[str, Node] = field(default_factory=dict)
    _doomed: dict[str, Change] = field(default_factory=dict)  # node -> its pending loss
    _replaced: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def start(self, nodes: Iterable[Node], now: float) -> None:
        """The run starts at `now` with `nodes`: ask the market when each transient one goes; availability-trace
        times count from `now`."""
        for node in nodes:
            self._doom(node, now)
        if self.market is not None:
            for i, row in enumerate(self.market.availability()):
                self._push(now + row.time, i)

    def watch(self, node: Node, now: float) -> None:
        """`node` joined at `now`: if it is transient, ask the market when it goes."""
        self._doom(node, now)

    def boot(self, node: Node, at: float) -> None:
        """`node` joins at `at` (a provider asked for it; it boots until then)."""
        self._booting[node.name] = node
        self._push(at, Change(Due.JOIN, node))

    def cancel(self, name: str) -> bool:
        """Forget a booting node (released before it joined); True if it was booting."""
        return self._booting.pop(name, None) is not None

    def booting(self) -> list[Node]:
        return list(self._booting.values())

    def doomed(self, name: str) -> bool:
        return name in self._doomed

    def due(self, now: float, alive: Sequence[Node]) -> list[Change]:
        """What has come due by `now` (`alive`: the engine's nodes now, for availability drops)."""
        out: list[Change] = []
        while self._agenda and self._agenda[0][0] <= now:
            at, _, item = heapq.heappop(self._agenda)
            if isinstance(item, int):
                out.extend(self._availability_drop(item, at, alive))
            elif item.kind is Due.JOIN:
                if self._booting.pop(item.node.name, None) is not None:  # else released while it booted
                    self._doom(item.node, at)
                    out.append(item)
            elif item.kind is Due.LOSS:
                self._doomed.pop(item.node.name, None)
                out.append(item)
            else:
                out.append(item)
        return out

    def lost(self, change: Change, at: float) -> None:
        """The engine took the node of a due LOSS out at `at`: count it, and book its replacement."""
        self.revocations.append((at, change.node.name, change.reason))
        if self.replace_delay is not None:
            base = change.node.name.split("~")[0]
            self.boot(dataclasses.replace(change.node, name=f"{base}~{next(self._replaced)}"), at + self.replace_delay)

    def next_at(self) -> float | None:
        return self._agenda[0][0] if self._agenda else None

    def quiet(self) -> bool:
        """No node is booting: what is left (revocations, availability rows) keeps no run going by itself."""
        return not self._booting

    # -- internals -------------------------------------------------------------
    def _doom(self, node: Node, joined_at: float) -> None:
        if self.market is None or not node.transient or node.name in self._doomed:
            return
        rev = self.market.revocation(node, joined_at)
        if rev is not None:
            loss = Change(Due.LOSS, node, rev.lost_at, rev.reason)
            self._doomed[node.name] = loss
            self._push(rev.notice_at, Change(Due.NOTICE, node, rev.lost_at, rev.reason))
            self._push(rev.lost_at, loss)

    def _availability_drop(self, index: int, at: float, alive: Sequence[Node]) -> list[Change]:
        """An availability row: the newest transient nodes of its zone and type beyond the count get the notice."""
        assert self.market is not None
        row = self.market.availability()[index]
        nodes = [n for n in alive if n.transient and n.zone == row.zone
                 and trace_type(n.gpu_type) == row.gpu_type and n.name not in self._doomed]
        out = []
        for node in nodes[row.available:][::-1]:
            lost_at = at + self.market.notice
            loss = Change(Due.LOSS, node, lost_at)
            self._doomed[node.name] = loss
            out.append(Change(Due.NOTICE, node, lost_at))
            self._push(lost_at, loss)
        return out

    def _push(self, at: float, item: Change | int) -> None:
        heapq.heappush(self._agenda, (at, next(self._seq), item))
