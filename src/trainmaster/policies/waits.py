"""Why a job waits, as data: hooks decide on `Wait.kind`, people read the text rendered from it.

Rewording a detail or `render` changes what `trainmaster why` prints, never a
decision: no hook reads a wait's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class WaitKind(Enum):
    QUOTA = "quota"  # a queue's quota holds it back (or reclaimed it: it ran on borrowed capacity)
    GANG = "gang"  # its whole gang needs more than is free
    FRAGMENTATION = "fragmentation"  # enough is free in total, but no set of eligible nodes holds the gang
    RESERVATION = "reservation"  # starting it would delay the reserved head job
    PRIORITY = "priority"  # behind an earlier job in the order, or preempted by a higher-ranked one
    NEVER_FITS = "never-fits"  # cannot run on this cluster even when empty (rejected)
    TRANSIENT_UNAVAILABLE = "transient-unavailable"  # needs transient nodes that are not there now
    BACKOFF = "backoff"  # waiting out a restart backoff after a failure
    HELD = "held"  # held by the user (the daemon's gate, server.gate): people, not capacity, decide
    DEPENDENCY = "dependency"  # waits for jobs it depends on to succeed (the daemon's gate)


CAPACITY = frozenset({WaitKind.GANG, WaitKind.FRAGMENTATION})  # waits that more free room would end


@dataclass(frozen=True, slots=True)
class Wait:
    """One blocked job's wait: its kind, a detail for people, and what is held for it meanwhile."""

    kind: WaitKind
    detail: str
    meanwhile: str = ""  # e.g. its reservation; shown after the detail

    def text(self) -> str:
        return render(self)


def render(wait: Wait) -> str:
    """`kind: detail; meanwhile`, the line `trainmaster why` and the decision history show."""
    return f"{wait.kind.value}: {wait.detail}" + (f"; {wait.meanwhile}" if wait.meanwhile else "")
