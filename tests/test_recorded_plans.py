"""Every preset's decisions on the synthetic workloads are pinned: a refactor that moves one allocation fails here.

The digests hash (time, job, allocation, wait kind) of every decision `bench.record_plans` records, not
the text people read: rewording a message must leave them as they are (the second test does exactly that).
A digest changes only with a deliberate change of behaviour; then re-record with
`python -m bench.record_plans --only synthetic --out DIR` and explain the difference in the commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainmaster.core.cluster import parse_shorthand
from trainmaster.policies import workspace
from trainmaster.policies.waits import Wait
from trainmaster.policies.workspace import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the recorder lives in bench/

from bench.record_plans import QUEUES, SYNTHETIC, plans_digest, record

pytestmark = pytest.mark.slow

PINNED = {  # preset -> (digest on 8x4, digest on 8x4 with three queues)
    "fifo": ("ba5e8e4abb3f8494", "ba5e8e4abb3f8494"),
    "drf": ("a20adb7268f0a961", "cb644e4f219ebf8a"),
    "tiresias": ("aa75256a2e05bef6", "aa75256a2e05bef6"),
    "srtf": ("536e1eb6e8bfa441", "536e1eb6e8bfa441"),
    "optimus": ("1d11fa5a8d7ede14", "1d11fa5a8d7ede14"),
    "edl": ("7f7999c8f33abf64", "a3a08eaba5a13bb4"),
    "trainmaster": ("0b66539faa0db980", "20e117ac0bc4f715"),  # issue 11: LAS time sharing, gain sizing
}


@pytest.mark.parametrize("preset", sorted(PINNED))
def test_synthetic_plans_are_pinned(preset: str) -> None:
    cluster = parse_shorthand("8x4")
    plain = record(SYNTHETIC, cluster, True, {}, preset)
    queued = record(SYNTHETIC, cluster, True, QUEUES, preset)
    assert (plans_digest(plain), plans_digest(queued)) == PINNED[preset]


@pytest.mark.parametrize("preset", ["tiresias", "optimus", "trainmaster", "edl"])
def test_rewording_every_message_changes_no_decision(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wait detail, note and rendering reworded: the same allocations and wait kinds, other texts."""
    cluster = parse_shorthand("8x4")
    note = Workspace.note
    monkeypatch.setattr(workspace, "Wait", lambda kind, detail, meanwhile="": Wait(kind, detail[::-1], meanwhile))
    monkeypatch.setattr(Workspace, "note", lambda self, jid, text: note(self, jid, "NOTE " + text[::-1]))
    monkeypatch.setattr(workspace, "render", lambda wait: f"<{wait.detail}|{wait.meanwhile[::-1]}>")
    reworded = record(SYNTHETIC, cluster, True, QUEUES, preset)
    monkeypatch.undo()
    assert plans_digest(reworded) == PINNED[preset][1]
    texts = [line.split("\t")[4] for line in reworded]
    assert any(t.startswith(("<", "NOTE ")) for t in texts)  # the rewording did reach the plans
