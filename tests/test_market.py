"""The market model: revocations fitted to the GCE lifetimes, availability traces, node types and prices."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainmaster.core.errors import SpecError
from trainmaster.core.gce import GCE_MAX_LIFETIME
from trainmaster.core.market import autoscale_from_mapping, available_at, gce_node_type
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.workloads.market import Lifetime, LifetimeMarket, TraceMarket, read_lifetimes

# ../shared/README.md: revoked before the 24 h cap, per GPU type.
MEASURED = {"k80": (20, 64), "p100": (8, 40), "v100": (5, 48)}


def _lifetimes(shared: Path) -> list[Lifetime]:
    return read_lifetimes(shared / "transient-gce/lifetime/lifetime.csv")


def test_reading_the_lifetimes_counts_the_published_revocations(shared_data: Path) -> None:
    lifetimes = _lifetimes(shared_data)
    for gpu, (revoked, vms) in MEASURED.items():
        mine = [x for x in lifetimes if x.gpu_type == gpu]
        assert (sum(x.revoked for x in mine), len(mine)) == (revoked, vms)
    central = [x for x in lifetimes if (x.gpu_type, x.zone) == ("k80", "us-central1-c")]
    assert sum(x.revoked for x in central) == 14  # "K80 in us-central1-c lost 14 of 16"


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_sampled_revocations_reproduce_the_measured_fraction_per_type(shared_data: Path, gpu: str) -> None:
    """Nodes spread over the measured zones as the VMs were; N draws give the fraction within 4 standard
    errors of a binomial (sqrt(p(1-p)/N) <= 0.0035 at N = 20,000, so 0.015): a wrong zone weighting or a
    sampler that ignored the cap would be off by far more (K80's zones range from 0/16 to 14/16)."""
    market = LifetimeMarket(_lifetimes(shared_data), seed=3)
    zones = [x.zone for x in market.lifetimes if x.gpu_type == gpu]
    n = 20_000
    revoked = lost_before_cap = 0
    for i in range(n):
        rev = market.revocation(Node(f"n{i}", Resources(gpu=1), gpu, zones[i % len(zones)], True), 100.0)
        assert rev is not None and rev.notice_at == max(100.0, rev.lost_at - 30.0)  # 30 s notice, or from the join
        assert 100.0 < rev.lost_at <= 100.0 + GCE_MAX_LIFETIME
        revoked += rev.reason == "revoked"
        lost_before_cap += rev.lost_at < 100.0 + GCE_MAX_LIFETIME
    want = MEASURED[gpu][0] / MEASURED[gpu][1]
    assert abs(revoked / n - want) < 0.015
    assert lost_before_cap == revoked


def test_zone_matters_and_small_zones_fall_back_to_the_type(shared_data: Path) -> None:
    market = LifetimeMarket(_lifetimes(shared_data))
    assert market.revocation_probability("k80", "us-central1-c") == 14 / 16
    assert market.revocation_probability("k80", "us-east1-c") == 0.0
    assert market.revocation_probability("k80", "mars-1a") == 20 / 64  # never measured: the type's pool
    assert market.revocation_probability("t4", "us-east1-c") == 33 / 152  # unknown type: every VM
    assert market.mean_time_to_loss("k80", "us-central1-c") < market.mean_time_to_loss("k80", "us-east1-c")


def test_draws_are_reproducible_and_on_demand_nodes_are_never_revoked(shared_data: Path) -> None:
    lifetimes = _lifetimes(shared_data)
    node = Node("a", Resources(gpu=1), "k80", "us-central1-c", True)
    first = [LifetimeMarket(lifetimes, seed=s).revocation(node, 0.0) for s in range(20)]
    again = [LifetimeMarket(lifetimes, seed=s).revocation(node, 0.0) for s in range(20)]
    assert first == again and len({r.lost_at for r in first if r}) > 10
    assert LifetimeMarket(lifetimes).revocation(Node("b", Resources(gpu=1), "k80", "us-central1-c"), 0.0) is None


def test_availability_trace_is_read_and_looked_up(tmp_path: Path) -> None:
    path = tmp_path / "avail.csv"
    path.write_text("time,zone,type,available\n0,z1,K80,4\n3600,z1,k80,1\n100,z2,v100,2\n")
    rows = TraceMarket.from_csv(path).availability()
    assert [r.time for r in rows] == [0, 100, 3600]
    assert available_at(rows, 50, "z1", "k80") == 4
    assert available_at(rows, 3600, "z1", "k80") == 1
    assert available_at(rows, 50, "z2", "v100") is None
    path.write_text("time,zone,type,available\n0,z1,k80,-1\n")
    with pytest.raises(SpecError, match=r"avail.csv:2: .*count >= 0"):
        TraceMarket.from_csv(path)
    path.write_text("when,zone,type,available\n")
    with pytest.raises(SpecError, match="start with time,zone,type,available"):
        TraceMarket.from_csv(path)


def test_gce_prices_and_autoscale_spec() -> None:
    k80 = gce_node_type("k80", "us-central1-c")
    assert math.isclose(k80.on_demand_price, 0.64) and math.isclose(k80.transient_price, 0.175)
    assert k80.make("x", transient=True).price_per_hour == k80.transient_price
    spec = autoscale_from_mapping({"autoscale": {"idleTimeout": 60, "maxCostPerHour": 3, "nodeTypes": [
        {"gpuType": "k80", "zone": "z", "maxTransient": 4, "maxOnDemand": 1},
        {"name": "cpu", "gpu": 0, "onDemandPrice": 0.2, "transientPrice": 0.05, "maxOnDemand": 2}]}})
    assert [o.key for o in spec.offers] == ["k80-z/on-demand", "k80-z/transient", "cpu/on-demand"]
    assert spec.idle_timeout == 60 and spec.max_cost_per_hour == 3 and not spec.consolidate
    on = autoscale_from_mapping({"autoscale": {"consolidate": True,
                                               "nodeTypes": [{"gpuType": "k80", "maxOnDemand": 1}]}})
    assert on.consolidate
    with pytest.raises(SpecError, match=r"autoscale.consolidate"):
        autoscale_from_mapping({"autoscale": {"consolidate": "yes", "nodeTypes": [{"maxOnDemand": 1}]}})
    with pytest.raises(SpecError, match=r"f.yaml: autoscale.nodeTypes\[0\].onDemandPrice: is required"):
        autoscale_from_mapping({"autoscale": {"nodeTypes": [{"gpuType": "t4", "maxOnDemand": 1}]}}, "f.yaml")
    with pytest.raises(SpecError, match=r"autoscale.nodeTypes\[0\]: allows no node"):
        autoscale_from_mapping({"autoscale": {"nodeTypes": [{"gpuType": "k80"}]}})
    with pytest.raises(SpecError, match=r"autoscale.idleTimeout"):
        autoscale_from_mapping({"autoscale": {"idleTimeout": "soon", "nodeTypes": [{"maxOnDemand": 1}]}})
