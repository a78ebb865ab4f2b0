"""The Kubernetes manifests in deploy/ against small JSON schemas of what each kind requires.

No API server (nor the KubeRay operator) can run here, so this checks structure only: kinds and API
versions, the fields Kubernetes and KubeRay reject a manifest without, and trainmaster's own
invariants (one daemon replica, the run dir at the same path in every pod, the engine flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = "/state/runs"

CONTAINER = {"type": "object", "required": ["name", "image"],
             "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                            "image": {"type": "string", "minLength": 1},
                            "volumeMounts": {"type": "array", "items": {"type": "object",
                                                                         "required": ["name", "mountPath"]}}}}
POD_TEMPLATE = {"type": "object", "required": ["spec"],
                "properties": {"spec": {"type": "object", "required": ["containers"],
                                        "properties": {"containers": {"type": "array", "minItems": 1,
                                                                      "items": CONTAINER},
                                                       "volumes": {"type": "array", "items": {
                                                           "type": "object", "required": ["name"]}}}}}}
METADATA = {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}}


def kind(api: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": api}, "kind": {"const": name}, "metadata": METADATA,
                           "spec": spec}}


SCHEMAS = {
    "RayCluster": kind("ray.io/v1", "RayCluster", {
        "type": "object", "required": ["headGroupSpec", "workerGroupSpecs"],
        "properties": {
            "headGroupSpec": {"type": "object", "required": ["rayStartParams", "template"],
                              "properties": {"template": POD_TEMPLATE}},
            "workerGroupSpecs": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["groupName", "replicas", "minReplicas", "maxReplicas",
                                               "rayStartParams", "template"],
                "properties": {"template": POD_TEMPLATE, "replicas": {"type": "integer", "minimum": 0}}}}}}),
    "Deployment": kind("apps/v1", "Deployment", {
        "type": "object", "required": ["selector", "template"],
        "properties": {"replicas": {"const": 1}, "strategy": {"properties": {"type": {"const": "Recreate"}}},
                       "selector": {"type": "object", "required": ["matchLabels"]},
                       "template": {"allOf": [POD_TEMPLATE, {"required": ["metadata"]}]}}}),
    "PersistentVolumeClaim": kind("v1", "PersistentVolumeClaim", {
        "type": "object", "required": ["accessModes", "resources"]}),
    "Service": kind("v1", "Service", {"type": "object", "required": ["selector", "ports"]}),
}


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


@pytest.mark.parametrize("doc", manifests(), ids=lambda d: f"{d.get('kind')}/{d.get('metadata', {}).get('name')}")
def test_each_manifest_matches_its_kinds_schema(doc: dict[str, Any]) -> None:
    assert doc.get("kind") in SCHEMAS, f"no schema for kind {doc.get('kind')}"
    jsonschema.validate(doc, SCHEMAS[doc["kind"]])


def test_the_daemon_runs_the_ray_engine_beside_the_head_with_the_shared_run_dir() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifests()}
    ray_cluster = docs["RayCluster", "trainmaster"]
    daemon = docs["Deployment", "trainmaster"]["spec"]["template"]["spec"]
    command = daemon["containers"][0]["command"]
    assert command[:4] == ["trainmaster", "server", "--engine", "ray"]
    assert command[command.index("--ray-address") + 1] == f"{ray_cluster['metadata']['name']}-head-svc:6379"
    data_dir = command[command.index("--data-dir") + 1]
    assert f"{data_dir}/runs" == RUN_DIR  # the daemon's run dir (data dir/runs) is the shared volume
    pods = [ray_cluster["spec"]["headGroupSpec"]["template"]["spec"], daemon,
            *(g["template"]["spec"] for g in ray_cluster["spec"]["workerGroupSpecs"])]
    for pod in pods:  # the same volume at the same path everywhere: checkpoints resume on any node
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        mounts = {m["mountPath"]: m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert claims[mounts[RUN_DIR]] == "trainmaster-shared"
    shared = docs["PersistentVolumeClaim", "trainmaster-shared"]["spec"]
    assert shared["accessModes"] == ["ReadWriteMany"]
    affinity = daemon["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["labelSelector"]["matchLabels"]["ray.io/node-type"] == "head"
