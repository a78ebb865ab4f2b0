"""`why`: the reason category and predicted start of pending jobs, from a controller; the CLI on a simulated run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queue_builders import J, queue, queues, simulate
from trainmaster.cli.main import main
from trainmaster.controller.why import category, explain, explain_pending
from trainmaster.core.errors import TrainmasterError
from trainmaster.core.states import JobState
from trainmaster.policies.trainmaster import build
from trainmaster.policies.waits import Wait, WaitKind


def est(seconds: float, **more: object) -> dict[str, object]:
    return {"estimate": seconds, **more}


SCENARIO = (J("a", 4, 0, 1000, fields=est(1000)), J("b", 8, 10, 500, fields=est(500)),
            J("c", 2, 20, 100, fields=est(100)), J("d", 2, 30, 5000, fields=est(5000)))


def test_reservation_scenario_answers_and_etas_match_the_actual_starts() -> None:
    run = simulate("2x4", build("t", elastic=False), *SCENARIO, until=40)
    answers = {w.job_id: w for w in explain_pending(run.controller)}
    assert set(answers) == {"b", "d"}
    assert (answers["b"].category, answers["b"].eta) == ("gang", 1000)
    assert (answers["d"].category, answers["d"].eta) == ("reservation", 1500)
    assert "predicted start t=1000" in answers["b"].line()
    assert explain(run.controller, "c").category == "running"
    run.controller.run()
    assert run.starts()["b"] == 1000 and run.starts()["d"] == 1500


def test_each_category() -> None:
    qs = queues(queue("a", gpu=2, borrowing=False), queue("b"))
    jobs = (J("a0", 2, duration=1000, fields={"queue": "a"}), J("a1", 1, 5, 100, fields={"queue": "a"}),
            J("huge", 99, 5, fields={"queue": "b"}), J("lost", 1, 5, fields={"queue": "nowhere"}),
            J("b0", 6, 0, 1000, fields={"queue": "b"}), J("b1", 4, 5, 100, fields={"queue": "b"}),
            J("b2", 1, 6, 100, fields={"queue": "b"}))
    run = simulate("2x4", build("t", backfill="none", elastic=False), *jobs, qs=qs, until=50)
    got = {jid: explain(run.controller, jid).category for jid in ("a1", "huge", "lost", "b1", "b2")}
    assert got == {"a1": "quota", "huge": "never-fits", "lost": "never-fits", "b1": "gang", "b2": "priority"}
    assert "unknown queue" in explain(run.controller, "lost").reason


def test_preempted_job_says_who_preempted_it() -> None:
    run = simulate("1x8", build("t", elastic=False, min_runtime=0, interval=50),
                   J("low", 8, 0, 1000), J("high", 8, 100, 300, fields={"priority": 5}), until=150)
    why = explain(run.controller, "low")
    assert why.state == JobState.PENDING.value and why.category == "gang"  # now it waits for room
    assert any("preempted by high" in text for _, text in why.history)


def test_unknown_job_is_a_clear_error() -> None:
    run = simulate("1x4", build("t"), J("a", 1), until=1)
    with pytest.raises(TrainmasterError, match="no job 'zz'"):
        explain(run.controller, "zz")


def test_category_is_the_wait_kind_never_its_text() -> None:
    assert category(Wait(WaitKind.PRIORITY, "quota: a text that starts like another kind"),
                    JobState.PENDING) == "priority"
    assert category(None, JobState.REJECTED) == "never-fits"
    assert category(Wait(WaitKind.GANG, "x"), JobState.PENDING, parked=True) == "backoff"
    assert category(None, JobState.PENDING) == "waiting"


def test_cli_why_answers_for_every_pending_job(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["why", "--workload", "synthetic:40", "--cluster", "1x4", "--policy", "trainmaster",
                 "--at", "20000", "--json"])
    assert code == 0
    answers = json.loads(capsys.readouterr().out)
    assert answers and all(a["state"] == "pending" for a in answers)
    assert all(a["category"] in ("quota", "gang", "fragmentation", "reservation", "priority") for a in answers)
    assert all(a["eta"] is not None and a["eta"] >= 20000 for a in answers)  # synthetic jobs carry estimates
    one = answers[0]["job"]
    assert main(["why", "--workload", "synthetic:40", "--cluster", "1x4", "--at", "20000", one]) == 0
    assert one in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "words"), [
    (["why", "--workload", "synthetic:5", "--cluster", "1x4", "--at", "10", "nope"], "no job 'nope'"),
    (["why", "--workload", "synthetic:5", "--cluster", "1x4"], "--at"),
    (["why", "--workload", "synthetic:5", "--at", "10", "--policy", "nope"], "unknown policy"),
    (["why"], "no job given"),  # neither a job for the live server nor a simulated run
])
def test_cli_why_errors_are_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_why_reads_queues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queues_file = tmp_path / "queues.yaml"
    queues_file.write_text("queues:\n  - {name: default, quota: {gpu: 2}, borrowing: false}\n")
    code = main(["why", "--workload", "synthetic:40", "--cluster", "1x4", "--at", "20000", "--json",
                 "--queues", str(queues_file)])
    assert code == 0
    answers = json.loads(capsys.readouterr().out)
    assert answers and {a["category"] for a in answers} == {"quota"}  # 2 of 4 GPUs is all the queue may use
