"""The job YAML: a valid document round-trips; each bad input gets one line naming field and fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from trainmaster.core.errors import SpecError
from trainmaster.core.job import Architecture, Role, TransientUse
from trainmaster.core.spec import apply_overrides, job_from_mapping, load_job, load_yaml_text

DOC: dict[str, Any] = {
    "apiVersion": "trainmaster/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "resnet-cifar", "queue": "research", "priority": 10},
    "spec": {
        "command": ["python", "train.py", "--epochs", "30"],
        "workdir": "examples/cifar",
        "architecture": "parameter-server",
        "roles": {
            "worker": {"min": 1, "max": 8, "resources": {"gpu": 1, "cpu": 4, "memory": "16Gi"}},
            "ps": {"min": 1, "max": 4, "resources": {"cpu": 2, "memory": "8Gi"}},
        },
        "target": {"epochs": 30},
        "transient": "allowed",
        "gpuTypes": ["v100", "p100"],
        "checkpoint": {"every": "300s"},
        "maxRestarts": 5,
    },
}


def test_design_example_loads() -> None:
    spec = job_from_mapping(DOC)
    assert spec.name == "resnet-cifar" and spec.queue == "research" and spec.priority == 10
    assert spec.architecture is Architecture.PARAMETER_SERVER
    worker = spec.roles[Role.WORKER]
    assert (worker.min, worker.max, worker.resources.gpu, worker.resources.memory) == (1, 8, 1, 16 * 2**30)
    assert spec.roles[Role.PS].resources.cpu == 2000
    assert spec.gpu_types == ("v100", "p100") and spec.transient is TransientUse.ALLOWED
    assert spec.checkpoint_every == 300 and spec.target.epochs == 30 and spec.elastic


def _broken(path: list[str], value: object) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


@pytest.mark.parametrize(("path", "value", "expected"), [
    (["spec", "roles", "worker", "min"], 9, "spec.roles.worker.min: min (9) is larger than max (8)"),
    (["spec", "roles", "worker", "resources"], {"gpu": -1}, "spec.roles.worker.resources.gpu: must not be negative"),
    (["spec", "colour"], "red", "spec.colour: unknown field"),
    (["metadata", "name"], KeyError, "metadata.name: is required"),
    (["spec", "architecture"], "mesh", "spec.architecture"),
    (["spec", "roles", "chief"], {"min": 1}, "spec.roles.chief: unknown role"),
    (["metadata", "name"], "Bad Name!", "metadata.name"),
    (["spec", "checkpoint", "every"], "soon", "spec.checkpoint.every"),
    (["spec", "maxRestarts"], -1, "spec.maxRestarts"),
])
def test_bad_fields_are_named(path: list[str], value: object, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_mapping(_broken(path, value))
    text = str(err.value)
    assert text.startswith(expected)
    assert "\n" not in text and "(" in text  # one line, with a fix in parentheses


def test_ps_role_needs_ps_architecture() -> None:
    with pytest.raises(SpecError, match=r"spec\.roles\.ps"):
        job_from_mapping(_broken(["spec", "architecture"], "allreduce"))


def test_malformed_yaml_gives_position() -> None:
    with pytest.raises(SpecError, match="malformed YAML at line 2"):
        load_yaml_text("a: [1, 2\nb: }")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_job(tmp_path / "nope.yaml")


def test_overrides_set_nested_fields() -> None:
    doc = apply_overrides(copy.deepcopy(DOC), ["spec.roles.worker.max=4", "metadata.priority=3"])
    spec = job_from_mapping(doc)
    assert spec.roles[Role.WORKER].max == 4 and spec.priority == 3
    with pytest.raises(SpecError, match="--set"):
        apply_overrides(doc, ["no-equals-sign"])
