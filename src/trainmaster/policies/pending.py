"""The pending jobs in submit order, kept across decisions so a decision's cost follows what changed.

A strict-order decision needs the line in order, the never-fits verdicts and
the head: each decision here costs C-level set operations over the pending ids
plus Python work for the jobs that arrived or left since the previous one,
never a Python pass over every job waiting in line.
"""

from __future__ import annotations

import bisect
from itertools import filterfalse
from operator import itemgetter

from trainmaster.policies.snapshot import Snapshot
from trainmaster.policies.workspace import ClusterMemo, never_fits

_Key = tuple[float, str]  # (submit time, id): `cycle.by_submit_time`'s order
_ID = itemgetter(1)


class PendingLine:
    """Pending job ids sorted by (submit time, id), with the ids of those that can never fit.

    Declared cross-decision policy state (a `Cycle` field); `sync` brings it in
    step with a snapshot's pending ids.
    """

    __slots__ = ("bad", "key_of", "keys", "memo")

    def __init__(self) -> None:
        self.keys: list[_Key] = []
        self.key_of: dict[str, _Key] = {}
        self.bad: set[str] = set()  # members with a never-fits verdict
        self.memo: ClusterMemo | None = None  # the cluster memo the verdicts come from

    def sync(self, snap: Snapshot, pending: tuple[str, ...] | list[str], memo: ClusterMemo) -> list[str]:
        """Bring the line in step with `pending` (the snapshot's pending ids); the ids in order."""
        key_of = self.key_of
        now = set(pending)
        gone = key_of.keys() - now
        new = now - key_of.keys()
        if gone:
            dropped = set(map(key_of.pop, gone))
            k = len(dropped)
            if dropped == set(self.keys[:k]):  # the front of the line left (strict order places a prefix)
                del self.keys[:k]
            else:
                self.keys = list(filterfalse(dropped.__contains__, self.keys))
            self.bad -= gone
        if memo is not self.memo:  # another cluster: every verdict again
            self.memo = memo
            self.bad = {jid for jid in key_of if self._never(snap, jid, memo)}
        if new:
            jobs = snap.jobs
            added = sorted((jobs[jid].submit_time, jid) for jid in new)
            for key in added:
                key_of[key[1]] = key
                if self._never(snap, key[1], memo):
                    self.bad.add(key[1])
            keys = self.keys
            if not keys or added[0] >= keys[-1]:
                keys.extend(added)  # arrivals join the back of the line (the common case)
            elif len(added) <= 8:
                for key in added:
                    bisect.insort(keys, key)
            else:
                keys.extend(added)
                keys.sort()
        return list(map(_ID, self.keys))

    @staticmethod
    def _never(snap: Snapshot, jid: str, memo: ClusterMemo) -> bool:
        reason = memo.never.get(jid, _UNSEEN)
        if reason is _UNSEEN:
            reason = memo.never[jid] = never_fits(snap.jobs[jid].spec, snap, memo)
        return reason is not None

    def rejected(self, ids: list[str], memo: ClusterMemo) -> dict[str, str]:
        """Why each pending job that can never fit cannot, in line order."""
        bad = self.bad
        return {jid: memo.never[jid] or "" for jid in ids if jid in bad} if bad else {}


_UNSEEN = "?"  # `ClusterMemo.never` has no verdict yet (a verdict is None or a non-empty reason)
