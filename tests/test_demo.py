"""`make demo`'s workload stays valid as the examples change: every arrival is accepted on the demo's cluster.

The demo itself runs for about two minutes of real training (`make demo`); this checks, in milliseconds,
what would make it fail at the first submission.
"""

from __future__ import annotations

from pathlib import Path

from trainmaster.cli.client import load_document
from trainmaster.cli.demo import CLUSTER_YAML, WORKLOAD, compact
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.job import Architecture
from trainmaster.core.runnable import check_runnable
from trainmaster.core.spec import job_from_mapping, load_yaml_text
from trainmaster.policies.snapshot import Snapshot
from trainmaster.policies.workspace import never_fits

REPO = Path(__file__).resolve().parents[1]


def test_every_arrival_is_a_valid_job_that_fits_the_demo_cluster() -> None:
    cluster = cluster_from_mapping(load_yaml_text(CLUSTER_YAML))
    specs = [job_from_mapping(load_document(REPO / a.path, a.overrides)) for a in WORKLOAD]
    for spec in specs:
        assert never_fits(spec, Snapshot(now=0.0, cluster=cluster, jobs={}, free={})) is None, spec.name
        # The workdir is absolute (resolved against the YAML's folder): the daemon's folder does not matter.
        assert check_runnable(spec, Path("/")).parent == REPO / "examples"
    assert len({s.name for s in specs}) == len(specs)
    # The mix the issue asks for: elastic all-reduce, fixed size, parameter server, two priorities.
    assert any(s.elastic and s.architecture is Architecture.ALLREDUCE for s in specs)
    assert any(not s.elastic for s in specs)
    assert any(s.architecture is Architecture.PARAMETER_SERVER for s in specs)
    assert len({s.priority for s in specs}) == 2
    assert [a.at for a in WORKLOAD] == sorted(a.at for a in WORKLOAD)


def test_compact_allocation() -> None:
    assert compact("worker=3@node-0,node-1 ps=1@node-1") == "3w+1ps"
    assert compact("") == "0"
