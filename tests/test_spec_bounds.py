"""Every number in the job, queue and cluster specs is bounded; paths resolve against the YAML's folder;
a command that cannot start is refused when it is submitted."""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import pytest

from trainmaster.cli.client import load_document
from trainmaster.core.cluster import cluster_from_mapping, parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.core.queue import queues_from_mapping
from trainmaster.core.runnable import check_runnable
from trainmaster.core.spec import job_from_mapping, load_job, load_yaml_text, resolve_workdir
from trainmaster.workloads.clusters import load_cluster

DOC: dict[str, Any] = {
    "apiVersion": "trainmaster/v1", "kind": "TrainingJob",
    "metadata": {"name": "j", "priority": 1},
    "spec": {"command": ["sh", "-c", "true"], "roles": {"worker": {"min": 1, "max": 2, "resources": {"cpu": 1}}},
             "target": {"steps": 10}, "checkpoint": {"every": "5s"}},
}


def with_value(path: str, value: object, doc: dict[str, Any] = DOC) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


BAD = [
    ("metadata.priority", 10**30, "between -1000000 and 1000000"),
    ("metadata.priority", 1e308, "between -1000000 and 1000000"),
    ("metadata.priority", math.inf, "metadata.priority"),
    ("metadata.priority", 99999999999999999999, "between"),
    ("spec.roles.worker.resources.cpu", math.nan, "between 0 and 1000000"),
    ("spec.roles.worker.resources.cpu", math.inf, "between 0 and 1000000"),
    ("spec.roles.worker.resources.cpu", 1e308, "between 0 and 1000000"),
    ("spec.roles.worker.resources.cpu", 10**400, "between 0 and 1000000"),
    ("spec.roles.worker.resources.cpu", "9" * 400, "between 0 and 1000000"),
    ("spec.roles.worker.resources.cpu", "9" * 5000 + "m", "is not a CPU count"),
    ("spec.roles.worker.resources.memory", "9" * 400 + "Ti", "between 0 and 1Ei"),
    ("spec.roles.worker.resources.memory", 10**400, "between 0 and 1Ei"),
    ("spec.roles.worker.resources.memory", math.nan, "between 0 and 1Ei"),
    ("spec.roles.worker.resources.gpu", 10**12, "between 0 and 100000"),
    ("spec.roles.worker.min", 10**9, "between 0 and 10000"),
    ("spec.roles.worker.max", 10**9, "between 0 and 10000"),
    ("spec.maxRestarts", 10**6, "between 0 and 1000"),
    ("spec.target.steps", 10**30, "between 1 and 1000000000000"),
    ("spec.target.epochs", 0, "between 1 and 1000000"),
    ("spec.target.loss", math.nan, "spec.target.loss: must be between"),
    ("spec.target.loss", -math.inf, "spec.target.loss: must be between"),
    ("spec.target.plateau", 2.0, "between 1e-12 and 1"),
    ("spec.target.window", 10**12, "between 1 and 10000000"),
    ("spec.checkpoint.every", math.inf, "spec.checkpoint.every: must be between 0 and 2592000"),
    ("spec.checkpoint.every", 10**400, "spec.checkpoint.every: must be between"),
    ("spec.checkpoint.every", "99999999999h", "spec.checkpoint.every: must be between"),
    ("spec.checkpoint.every", math.nan, "spec.checkpoint.every"),
    ("spec.estimate", "1" * 20 + "h", "spec.estimate"),
    ("spec.estimate", 1e300, "spec.estimate: must be between 0 and 31536000"),
    ("spec.command", ["sh", "a\0b"], "spec.command[1]: contains a NUL character"),
    ("spec.env", {"A": "x" * 70_000}, "spec.env: the value of A is over 65536 bytes"),
    ("spec.env", {"1A": "x"}, "spec.env: 1A is not an environment variable name"),
]


@pytest.mark.parametrize(("path", "value", "words"), BAD, ids=[f"{p}={str(v)[:12]}" for p, v, _ in BAD])
def test_out_of_range_numbers_are_one_line_errors_naming_the_field_and_range(path: str, value: object,
                                                                             words: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_mapping(with_value(path, value))
    text = str(err.value)
    assert err.value.field.startswith(path.rsplit(".", 1)[0]) and words in text, text
    assert "\n" not in text and "(" in text and len(text) < 300


def test_values_at_the_bounds_are_accepted() -> None:
    doc = with_value("metadata.priority", 1_000_000)
    doc = with_value("spec.roles.worker.resources", {"cpu": 1_000_000, "memory": "1024Ti", "gpu": 100_000}, doc)
    doc = with_value("spec.checkpoint.every", "720h", doc)
    spec = job_from_mapping(with_value("spec.maxRestarts", 1000, doc))
    assert spec.priority == 1_000_000 and spec.max_restarts == 1000 and spec.checkpoint_every == 720 * 3600


@pytest.mark.parametrize(("queues", "field", "words"), [
    ([{"name": "a", "weight": math.inf}], "queues[0].weight", "between 1e-06 and 1000000"),
    ([{"name": "a", "weight": math.nan}], "queues[0].weight", "between"),
    ([{"name": "a", "priority": 10**30}], "queues[0].priority", "between -1000000 and 1000000"),
    ([{"name": "a", "gpuTypes": {"v100": 10**9}}], "queues[0].gpuTypes.v100", "between 0 and 100000"),
    ([{"name": "a", "quota": {"cpu": math.inf}}], "queues[0].quota.cpu", "between 0 and 1000000"),
    ([{"name": "a", "quota": {"memory": "1e400"}}], "queues[0].quota.memory", "not a memory size"),
    ([{"name": ""}], "queues[0].name", "at least 1 character"),
])
def test_queue_bounds(queues: list[object], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        queues_from_mapping({"queues": queues})
    assert err.value.field == field and words in str(err.value), str(err.value)


@pytest.mark.parametrize(("node", "field", "words"), [
    ({"count": 10**9}, "cluster.nodes[0].count", "between 0 and 100000"),
    ({"gpu": 10**9}, "cluster.nodes[0].gpu", "less than or equal to 100000"),
    ({"cpu": math.nan}, "cluster.nodes[0].cpu", "between 0 and 1000000"),
    ({"memory": "1" * 30 + "Ti"}, "cluster.nodes[0].memory", "between 0 and 1Ei"),
    ({"pricePerHour": math.inf}, "cluster.nodes[0].pricePerHour", "between 0 and 1000000"),
    ({"pricePerHour": True}, "cluster.nodes[0].pricePerHour", "cluster.nodes[0].pricePerHour"),
    ({"transient": "yes"}, "cluster.nodes[0].transient", "valid boolean"),
    ({"labels": {"rack": [1]}}, "cluster.nodes[0].labels.rack", "cluster.nodes[0].labels.rack"),
])
def test_cluster_bounds(node: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        cluster_from_mapping({"nodes": [{"name": "a", **node}]})
    assert err.value.field.startswith(field) and words in str(err.value), str(err.value)


def test_cluster_sizes_are_bounded_before_anything_is_built(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="too large"):
        parse_shorthand("99999999999x4")
    with pytest.raises(SpecError, match="too large"):
        parse_shorthand("60000x4+60000x4")
    with pytest.raises(SpecError, match="more than 100000 nodes"):
        cluster_from_mapping({"nodes": [{"name": "a", "count": 60_000}, {"name": "b", "count": 60_000}]})
    csv = tmp_path / "cluster.csv"
    csv.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1000000,1000000,8,64,256\n")
    with pytest.raises(SpecError, match="more than 100000 nodes"):
        load_cluster(str(csv))
    csv.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1,inf,64,256\n")
    with pytest.raises(SpecError, match="'inf' is not a whole number"):
        load_cluster(str(csv))


@pytest.mark.parametrize("text", ["a: " + "[" * 5000 + "]" * 5000, "a: " + "9" * 5000, "a: 2020-13-45"])
def test_yaml_that_pyyaml_cannot_build_is_a_spec_error(text: str) -> None:
    with pytest.raises(SpecError) as err:
        load_yaml_text(text, "job")
    assert err.value.field == "job" and "\n" not in str(err.value)


# -- paths ---------------------------------------------------------------------------
def test_workdir_resolves_against_the_yaml_folder(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    (folder / "sub").mkdir(parents=True)
    path = folder / "job.yaml"
    path.write_text(_yaml(DOC))
    assert load_job(path).workdir == str(folder.resolve())  # missing: the YAML's own folder
    assert load_document(path, ["spec.workdir=sub"])["spec"]["workdir"] == str(folder.resolve() / "sub")
    assert load_document(path, ["spec.workdir=/opt"])["spec"]["workdir"] == "/opt"
    assert resolve_workdir({"spec": "not a mapping"}, folder) == {"spec": "not a mapping"}
    assert resolve_workdir({"spec": {"workdir": 3}}, folder) == {"spec": {"workdir": 3}}  # left for validation
    # Submitting by a relative path from elsewhere gives the same absolute workdir.
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert load_document("proj/job.yaml")["spec"]["workdir"] == str(folder.resolve())
    finally:
        os.chdir(cwd)


def _yaml(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc)


def test_check_runnable_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)

    def spec(command: list[str], workdir: str | None = None) -> Any:
        return job_from_mapping(with_value("spec.workdir", workdir, with_value("spec.command", command)))

    assert check_runnable(spec(["python", "train.py"]), tmp_path) == tmp_path
    assert check_runnable(spec(["python3", "-u", "-W", "ignore", "train.py"]), tmp_path) == tmp_path
    assert check_runnable(spec(["python", "-m", "json.tool"]), tmp_path) == tmp_path
    assert check_runnable(spec(["python", "-c", "pass"]), tmp_path) == tmp_path
    assert check_runnable(spec(["./tool.sh"]), tmp_path) == tmp_path
    assert check_runnable(spec(["sh", "-c", "true"], str(tmp_path)), Path("/nonexistent")) == tmp_path
    refused = [
        (spec([]), "spec.command: is required"),
        (spec(["python", "missing.py"]), "spec.command: 'missing.py': no such file"),
        (spec(["python"]), "spec.command: python without a script"),
        (spec(["./absent.sh"]), "spec.command: './absent.sh': no such executable"),
        (spec(["no-such-program-xyz"]), "spec.command: 'no-such-program-xyz' is not on the server's PATH"),
        (spec(["true"], "/nonexistent"), "spec.workdir: '/nonexistent': no such folder"),
        (spec(["true"], "rel"), f"no such folder (relative to the server's folder {tmp_path})"),
        (spec(["true"], "x" * 4000), "spec.workdir"),  # too long for the filesystem: still a clean error
    ]
    for job, words in refused:
        with pytest.raises(SpecError) as err:
            check_runnable(job, tmp_path)
        assert words in str(err.value), str(err.value)
