"""The SQLite store: unique ids, atomic step batches, and everything still there after reopening the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trainmaster.server.store import Batch, Store

DOC = {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "a"},
       "spec": {"roles": {"worker": {"min": 1}}}}


def test_ids_are_the_name_then_suffixed_and_survive_reopening(tmp_path: Path) -> None:
    store = Store(tmp_path / "tm.db")
    ids = [store.add_job(DOC, "a", "default", 0, now=float(i))["id"] for i in range(3)]
    ids.append(store.add_job(DOC, "b", "research", 5, now=3.0)["id"])
    assert ids == ["a", "a-1", "a-2", "b"]
    store.close()
    again = Store(tmp_path / "tm.db")
    rows = again.jobs()
    assert [r["id"] for r in rows] == ids
    assert rows[3]["queue"] == "research" and rows[3]["priority"] == 5
    assert again.add_job(DOC, "a", "default", 0, now=4.0)["id"] == "a-3"
    assert again.unfinished()[0]["doc"] == DOC  # the submitted document, to rebuild the spec
    assert again.events("a")[0]["what"] == "accepted"


def test_a_batch_lands_whole_and_drives_unfinished(tmp_path: Path) -> None:
    store = Store(tmp_path / "tm.db")
    for name in ("a", "b", "c"):
        store.add_job(DOC, name, "default", 0, now=1.0)
    batch = Batch()
    batch.jobs["a"] = {"state": "running", "first_start": 2.0, "step": 40, "loss": 0.5, "allocation": "worker=2@n0",
                       "tasks": 2, "restarts": 1}
    batch.jobs["b"] = {"state": "succeeded", "finish_time": 9.0}
    batch.tasks["a"] = [("worker", 0, "n0"), ("worker", 1, "n0")]
    batch.events.append((2.0, "a", "start", "starting", "worker=2@n0", 0, 2, "placed"))
    batch.reports.append(("a", 3.0, 40, 0.5, 2.0, 64.0, 2))
    batch.decisions.append(("a", 2.0, "start: worker=2@n0"))
    store.write(batch)
    store.request_cancel("c")
    store.close()

    store = Store(tmp_path / "tm.db")
    a = store.job("a")
    assert a is not None
    assert (a["state"], a["step"], a["loss"], a["restarts"], a["tasks"]) == ("running", 40, 0.5, 1, 2)
    assert store.job("b")["jct"] == 8.0  # type: ignore[index]
    assert [r["id"] for r in store.unfinished()] == ["a", "c"]
    assert store.unfinished()[1]["cancel_requested"] is True
    assert store.tasks() == [{"job_id": "a", "role": "worker", "idx": 0, "node": "n0"},
                             {"job_id": "a", "role": "worker", "idx": 1, "node": "n0"}]
    assert store.reports("a") == [{"time": 3.0, "step": 40, "loss": 0.5, "steps_per_s": 2.0, "samples_per_s": 64.0,
                                   "tasks": 2}]
    assert [d["text"] for d in store.decisions("a")] == ["start: worker=2@n0"]
    assert [r["id"] for r in store.jobs(["running", "pending"])] == ["a", "c"]
    assert store.job("zzz") is None


def test_a_failing_batch_changes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "tm.db")
    store.add_job(DOC, "a", "default", 0, now=1.0)
    batch = Batch()
    batch.jobs["a"] = {"state": "running"}
    batch.reports.append(("a", 3.0, None, None, None, None, None))  # type: ignore[arg-type]  # step NOT NULL
    try:
        store.write(batch)
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("the NOT NULL step should have been refused")
    assert store.job("a")["state"] == "pending"  # type: ignore[index]
    assert store.reports("a") == []
