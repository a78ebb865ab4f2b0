"""The speed model learns per GPU type from reports; the simulator's Gavel truth differs per type."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from builders import job
from trainmaster.controller.learning import one_gpu_type
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import Role
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import GENERIC_TYPE_SPEED, Config, TypeRates, relative_speeds
from trainmaster.workloads.gavel import GavelTruth, load_throughputs


def _on(*nodes: str) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, n) for n in nodes)


def _ratio(speeds: dict[str, float] | object, a: str, b: str) -> float:
    table = dict(speeds)  # type: ignore[call-overload]
    return float(table[a] / table[b])


def test_without_reports_the_prior_holds_and_one_type_teaches_no_ratio() -> None:
    assert relative_speeds(None) == pytest.approx(GENERIC_TYPE_SPEED)
    one = TypeRates()
    one.add(Config(2), "k80", 10.0)
    assert _ratio(relative_speeds(one), "v100", "k80") == pytest.approx(4.1)


def test_measured_ratios_replace_the_prior_and_unseen_types_keep_theirs() -> None:
    rates = TypeRates()
    for c, k80 in ((Config(1), 1.0), (Config(2), 1.9), (Config(4), 3.5)):
        rates.add(c, "k80", k80)
        rates.add(c, "v100", 1.5 * k80)  # this job gains only 1.5x on a v100 (prior: 4.1x)
    speeds = relative_speeds(rates)
    assert _ratio(speeds, "v100", "k80") == pytest.approx(1.5, rel=1e-6)
    # never seen: the prior's ratio to the seen types' geometric centre (3.3 / sqrt(1 * 4.1))
    assert speeds["p100"] / math.sqrt(speeds["k80"] * speeds["v100"]) == pytest.approx(3.3 / math.sqrt(4.1))


def test_the_book_learns_a_jobs_speed_per_type_and_its_siblings_inherit_it() -> None:
    book = ModelBook()
    a, b, c = (job(n, 2, job_type="recommendation") for n in ("a", "b", "c"))
    for t in range(3):
        book.observe("a", a, Report(time=t, job_id="a", step=t, steps_per_s=10.0, allocation=_on("k0", "k0")),
                     gpu_type="k80")
    assert not book.model("a", a).type_speed  # one type: nothing relative to learn yet
    for t in range(3):
        book.observe("b", b, Report(time=t, job_id="b", step=t, steps_per_s=7.0, allocation=_on("v0", "v0")),
                     gpu_type="v100")
    # a and b share a job type and configuration: the type learned a v100 is 0.7x a k80 for it (Gavel's
    # Recommendation is indeed slower on a v100), and c, which never reported, starts from that.
    for jid, spec in (("a", a), ("c", c)):
        assert _ratio(book.model(jid, spec).type_speed, "v100", "k80") == pytest.approx(0.7, rel=1e-6)


def test_a_report_counts_for_one_gpu_type_only_when_all_its_gpus_are_of_it() -> None:
    cl = parse_shorthand("1x4:k80+1x4:v100")
    spec = job("j", 2)
    names = [n.name for n in cl.nodes]
    assert one_gpu_type(cl, _on(names[0], names[0]), spec) == "k80"
    assert one_gpu_type(cl, _on(names[0], names[1]), spec) is None  # mixed: runs at its slowest, says little
    assert one_gpu_type(cl, None, spec) is None


def test_gavel_ground_truth_differs_per_gpu_type(shared_data: Path) -> None:
    table = load_throughputs(shared_data / "gavel" / "simulation_throughputs.json")
    truth = GavelTruth("ResNet-50 (batch size 64)", 1, 1000.0, table)
    spec = job("r", 1)
    speeds = {}
    for kind in ("k80", "p100", "v100"):
        cl = parse_shorthand(f"1x4:{kind}")
        speeds[kind] = truth.steps_per_second(_on(cl.nodes[0].name), spec, cl)
    assert speeds["k80"] < speeds["p100"] < speeds["v100"]
    assert math.isclose(speeds["v100"] / speeds["k80"], table["v100"][("ResNet-50 (batch size 64)", 1)]
                        / table["k80"][("ResNet-50 (batch size 64)", 1)])
