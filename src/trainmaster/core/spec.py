"""The job YAML at the edge: validated with pydantic, turned into a frozen `JobSpec`.

Every error names the field and the fix in one line (`SpecError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainmaster.core.errors import SpecError
from trainmaster.core.job import (
    Architecture,
    JobKind,
    JobSpec,
    Role,
    RoleSpec,
    Target,
    TransientUse,
)
from trainmaster.core.resources import Resources

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Metadata(_Strict):
    name: str
    queue: str = "default"
    priority: int = 0
    labels: dict[str, str] = Field(default_factory=dict)


class _Role(_Strict):
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=0)
    resources: dict[str, Any] = Field(default_factory=dict)


class _Target(_Strict):
    steps: int | None = Field(default=None, gt=0)
    epochs: int | None = Field(default=None, gt=0)
    loss: float | None = None
    plateau: float | None = Field(default=None, gt=0)
    window: int = Field(default=100, gt=0)


class _Checkpoint(_Strict):
    every: str | float = "300s"


class _Spec(_Strict):
    command: list[str] = Field(default_factory=list)
    workdir: str | None = None
    architecture: Literal["allreduce", "parameter-server"] = "allreduce"
    roles: dict[str, _Role]
    target: _Target = Field(default_factory=_Target)
    transient: Literal["never", "allowed", "preferred"] = "allowed"
    gpu_types: list[str] = Field(default_factory=list, alias="gpuTypes")
    checkpoint: _Checkpoint = Field(default_factory=_Checkpoint)
    max_restarts: int = Field(default=5, ge=0, alias="maxRestarts")
    kind: Literal["training", "service"] = "training"
    estimate: str | float | None = None
    job_type: str | None = Field(default=None, alias="jobType")
    env: dict[str, str] = Field(default_factory=dict)
    after: list[str] = Field(default_factory=list, max_length=100)  # job ids that must succeed first


class _Document(_Strict):
    api_version: Literal["trainmaster/v1"] = Field(alias="apiVersion")
    kind: Literal["TrainingJob"]
    metadata: _Metadata
    spec: _Spec


_FIXES = {
    "extra_forbidden": "remove it or check its spelling against the job spec in the README",
    "missing": "add it",
    "literal_error": "use one of the allowed values",
    "int_type": "write a whole number",
    "int_parsing": "write a whole number",
    "float_type": "write a number",
    "float_parsing": "write a number",
    "greater_than_equal": "use a value that is not negative",
    "greater_than": "use a positive value",
    "list_type": "write a list",
    "dict_type": "write a mapping",
    "string_type": "write a string",
}


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(exc: ValidationError) -> SpecError:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    kind = err["type"]
    problem = "unknown field" if kind == "extra_forbidden" else (
        "is required" if kind == "missing" else err["msg"].lower())
    return SpecError(_field_path(loc), problem, _FIXES.get(kind, "see the job spec in the README"))


def parse_duration(value: str | float, field: str) -> float:
    """`300s`, `5m`, `2h` or plain seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    else:
        raise SpecError(field, f"{value!r} is not a duration", "write e.g. 300s, 5m or 2h")
    if seconds < 0:
        raise SpecError(field, "must not be negative", "use a positive duration")
    return seconds


def job_from_mapping(doc: object) -> JobSpec:
    """Validate a parsed YAML/JSON document and build the JobSpec, or raise SpecError."""
    if not isinstance(doc, Mapping):
        raise SpecError("", "the job document must be a mapping", "start with `apiVersion: trainmaster/v1`")
    try:
        model = _Document.model_validate(doc)
    except ValidationError as exc:
        raise _first_error(exc) from None
    meta, spec = model.metadata, model.spec
    if not _NAME.match(meta.name):
        raise SpecError("metadata.name", f"{meta.name!r} is not a valid name",
                        "use lower-case letters, digits, '-', '_' or '.', at most 64 characters")
    if not spec.roles:
        raise SpecError("spec.roles", "is empty", "add a `worker:` role")
    roles: dict[Role, RoleSpec] = {}
    for name, role in spec.roles.items():
        path = f"spec.roles.{name}"
        try:
            role_enum = Role(name)
        except ValueError:
            raise SpecError(path, "unknown role", "use `worker` or `ps`") from None
        hi = role.min if role.max is None else role.max
        if role.min > hi:
            raise SpecError(f"{path}.min", f"min ({role.min}) is larger than max ({hi})",
                            "make min <= max")
        if hi == 0:
            raise SpecError(f"{path}.max", "must be at least 1", "ask for at least one replica")
        resources = Resources.parse(role.resources, f"{path}.resources")
        roles[role_enum] = RoleSpec(min=role.min, max=hi, resources=resources)
    if Role.WORKER not in roles:
        raise SpecError("spec.roles.worker", "is required", "add a `worker:` role")
    architecture = Architecture(spec.architecture)
    if Role.PS in roles and architecture is not Architecture.PARAMETER_SERVER:
        raise SpecError("spec.roles.ps", "only parameter-server jobs have a ps role",
                        "set `architecture: parameter-server` or remove the ps role")
    if architecture is Architecture.PARAMETER_SERVER and Role.PS not in roles:
        raise SpecError("spec.roles.ps", "is required for a parameter-server job", "add a `ps:` role")
    kind = JobKind(spec.kind)
    if kind is JobKind.SERVICE and any(r.elastic for r in roles.values()):
        raise SpecError("spec.kind", "a service has a fixed size", "set min equal to max for every role")
    estimate = None if spec.estimate is None else parse_duration(spec.estimate, "spec.estimate")
    return JobSpec(
        name=meta.name,
        queue=meta.queue,
        priority=meta.priority,
        roles=roles,
        command=tuple(spec.command),
        workdir=spec.workdir,
        architecture=architecture,
        target=Target(**spec.target.model_dump()),
        transient=TransientUse(spec.transient),
        gpu_types=tuple(spec.gpu_types),
        checkpoint_every=parse_duration(spec.checkpoint.every, "spec.checkpoint.every"),
        max_restarts=spec.max_restarts,
        kind=kind,
        estimate=estimate,
        job_type=spec.job_type,
        env=tuple(sorted(spec.env.items())),
        labels=tuple(sorted(meta.labels.items())),
        after=tuple(dict.fromkeys(spec.after)),
    )


def load_yaml_text(text: str, where: str = "job") -> object:
    """Parse YAML, turning syntax errors into one line with the position."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(where, f"malformed YAML{at}: {problem}", "fix the YAML syntax") from None


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a job YAML file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(p), "no such file", "check the path to the job YAML")
    return job_from_mapping(load_yaml_text(p.read_text(), str(p)))


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set a.b.c=value` overrides (value parsed as YAML) to a job document."""
    for item in overrides:
        if "=" not in item:
            raise SpecError("--set", f"{item!r} has no '='", "write --set spec.roles.worker.max=4")
        key, raw = item.split("=", 1)
        value = load_yaml_text(raw, f"--set {key}")
        node: dict[str, Any] = doc
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SpecError(key, f"{part} is not a mapping", "override a leaf field")
            node = child
        node[parts[-1]] = value
    return doc
