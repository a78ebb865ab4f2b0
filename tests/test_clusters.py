"""Cluster specs from shorthand, YAML, Tiresias CSVs and the Alibaba PAI machine list."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmaster.core.errors import SpecError
from trainmaster.core.resources import Resources
from trainmaster.workloads.clusters import load_cluster, load_pai_cluster


def test_shorthand() -> None:
    cluster = load_cluster("311x8+2x1")
    assert len(cluster) == 313 and cluster.total.gpu == 2490


def test_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {name: a, count: 3, gpu: 4, gpuType: v100, cpu: 32, memory: 128Gi}\n")
    cluster = load_cluster(str(path))
    assert [n.name for n in cluster.nodes] == ["a-0", "a-1", "a-2"]
    assert cluster.node("a-1").capacity == Resources(cpu=32000, memory=128 * 2**30, gpu=4)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [ {name: a\n")
    with pytest.raises(SpecError, match="malformed YAML at line 2"):
        load_cluster(str(bad))


def test_tiresias_cluster_csv(shared_data: Path) -> None:
    cluster = load_cluster(str(shared_data / "tiresias" / "n160g8.csv"))  # 5,32,8,128,256
    assert len(cluster) == 160 and cluster.total.gpu == 1280
    node = cluster.node("s4-n31")
    assert node.capacity == Resources(cpu=128_000, memory=256 * 2**30, gpu=8) and node.label("switch") == "s4"
    assert load_cluster(str(shared_data / "tiresias" / "cluster_spec.csv")).total.gpu == 64  # 1,16,4,...


def test_alibaba_pai_machines(shared_data: Path) -> None:
    path = shared_data / "alibaba-pai" / "pai_machine_spec.csv"
    cluster = load_cluster(str(path))
    assert len(cluster) == 1897
    # 280 MISC x 8 + 798 P100 x 2 + 497 T4 x 2 + (45 + 59) V100 x 8 + 135 V100M32 x 8
    assert cluster.total.gpu == 6742
    assert cluster.gpu_types == {"misc", "p100", "t4", "v100", "v100m32"}
    cpu_only = [n for n in cluster.nodes if n.capacity.gpu == 0]
    assert len(cpu_only) == 83 and all(n.gpu_type is None for n in cpu_only)
    assert len(load_pai_cluster(path, gpu_only=True)) == 1897 - 83


def test_missing_and_unknown_files_name_them(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"missing\.yaml: file not found"):
        load_cluster(str(tmp_path / "missing.yaml"))
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b\n1,2\n")
    with pytest.raises(SpecError, match="not a cluster file"):
        load_cluster(str(odd))
    with pytest.raises(SpecError, match="not a cluster spec"):
        load_cluster("16by4")
