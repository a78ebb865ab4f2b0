"""The job YAML at the edge: validated with pydantic, turned into a frozen `JobSpec`.

Every error names the field and the fix in one line (`SpecError`).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, StrictBool, ValidationError
from pydantic_core import PydanticCustomError

from trainmaster.core.errors import SpecError, shown
from trainmaster.core.job import (
    Architecture,
    BatchRange,
    JobKind,
    JobSpec,
    Role,
    RoleSpec,
    Target,
    TransientUse,
)
from trainmaster.core.resources import Resources
from trainmaster.core.validation import (
    CHECKPOINT_SECONDS,
    ESTIMATE_SECONDS,
    MAX_ENV_BYTES,
    MAX_TEXT,
    Batch,
    Epochs,
    Loss,
    Plateau,
    Price,
    Priority,
    Replicas,
    Restarts,
    Steps,
    Strict,
    Window,
    check_range,
    first_error,
)

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$")
_DURATION = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,15})?)\s*(s|m|h)?\s*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
_Text = Annotated[str, Field(max_length=MAX_TEXT)]


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise PydanticCustomError("nul_character", "contains a NUL character")
    return value


_Arg = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_no_nul)]


def _env_ok(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise PydanticCustomError("env_name", "{key} is not an environment variable name", {"key": key[:40]})
        if "\0" in value or len(value.encode("utf-8", "surrogatepass")) > MAX_ENV_BYTES:
            raise PydanticCustomError("env_value", "the value of {key} is over {limit} bytes or holds a NUL",
                                      {"key": key, "limit": MAX_ENV_BYTES})
    return env


class _Metadata(Strict):
    name: _Text
    queue: _Text = "default"
    priority: Priority = 0
    labels: dict[_Text, _Text] = Field(default_factory=dict)


class _Role(Strict):
    min: Replicas = 1
    max: Replicas | None = None
    resources: dict[str, Any] = Field(default_factory=dict)


class _Target(Strict):
    steps: Steps | None = None
    epochs: Epochs | None = None
    loss: Loss | None = None
    plateau: Plateau | None = None
    window: Window = 100


# A duration: `300s`, `5m`, `2h` or seconds; parse_duration checks the type and the range.
_Duration = Annotated[Any, Field(json_schema_extra={"anyOf": [{"type": "string"}, {"type": "number"}]})]


class _Checkpoint(Strict):
    every: _Duration = None  # None or `auto`: 300 s until revocations are seen, then Young/Daly (core.job)


DEFAULT_CHECKPOINT = 300.0
DEADLINE_SECONDS = (1.0, 365 * 86_400.0)


class _AdaptiveBatch(Strict):
    min: Batch
    max: Batch
    base: Batch | None = None  # the batch the learning rate was tuned for (default: min)
    local_max: Batch | None = Field(default=None, alias="localMax")  # samples one replica computes at once


class _Spec(Strict):
    command: list[_Arg] = Field(default_factory=list, max_length=1024)
    workdir: _Arg | None = None
    architecture: Literal["allreduce", "parameter-server"] = "allreduce"
    roles: dict[str, _Role]
    target: _Target = Field(default_factory=_Target)
    transient: Literal["never", "allowed", "preferred"] = "allowed"
    gpu_types: list[_Text] = Field(default_factory=list, alias="gpuTypes", max_length=64)
    require_gpu_types: list[_Text] = Field(default_factory=list, alias="requireGpuTypes", max_length=64)
    anchors_on_demand: StrictBool = Field(default=True, alias="anchorsOnDemand")
    budget: Price | None = None  # dollars
    deadline: _Duration = None  # a duration after submission, or an ISO 8601 time
    checkpoint: _Checkpoint = Field(default_factory=_Checkpoint)
    max_restarts: Restarts = Field(default=5, alias="maxRestarts")
    kind: Literal["training", "service"] = "training"
    estimate: _Duration = None
    job_type: _Text | None = Field(default=None, alias="jobType")
    env: Annotated[dict[str, str], AfterValidator(_env_ok)] = Field(default_factory=dict)
    after: list[_Text] = Field(default_factory=list, max_length=100)  # job ids that must succeed first
    adaptive_batch: _AdaptiveBatch | None = Field(default=None, alias="adaptiveBatch")


class _Document(Strict):
    api_version: Literal["trainmaster/v1"] = Field(alias="apiVersion")
    kind: Literal["TrainingJob"]
    metadata: _Metadata
    spec: _Spec


def job_schema(ref_template: str = "#/$defs/{model}") -> dict[str, Any]:
    """The job document's JSON schema (the API publishes it as the request body of `POST /v1/jobs`)."""
    return _Document.model_json_schema(by_alias=True, ref_template=ref_template)


def parse_duration(value: object, field: str, bounds: tuple[float, float] = CHECKPOINT_SECONDS) -> float:
    """`300s`, `5m`, `2h` or plain seconds, within `bounds`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value) if not isinstance(value, int) or abs(value) <= bounds[1] else math.inf
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    else:
        raise SpecError(field, f"{shown(value)} is not a duration", "write e.g. 300s, 5m or 2h")
    if seconds < 0:
        raise SpecError(field, "must not be negative", "use a positive duration")
    check_range(seconds, *bounds, field, "duration in seconds")
    return seconds


def parse_deadline(value: object, field: str = "spec.deadline", now: float | None = None) -> float:
    """Seconds after submission: a duration (`6h`), or an ISO 8601 time taken relative to `now` (wall clock)."""
    if isinstance(value, str) and not _DURATION.match(value):
        try:
            at = datetime.fromisoformat(value.strip())
        except ValueError:
            raise SpecError(field, f"{shown(value)} is neither a duration nor an ISO 8601 time",
                            "write e.g. 6h, 3600 or 2026-11-24T08:00:00+00:00") from None
        if at.tzinfo is None:
            raise SpecError(field, "the time has no time zone", "add one, e.g. +00:00 or Z")
        seconds = at.timestamp() - (time.time() if now is None else now)
        if seconds < DEADLINE_SECONDS[0] and now is None:
            raise SpecError(field, f"{value} is already past", "give a time in the future or a duration")
        check_range(max(seconds, DEADLINE_SECONDS[0]), *DEADLINE_SECONDS, field, "time")
        return max(seconds, DEADLINE_SECONDS[0])
    return parse_duration(value, field, DEADLINE_SECONDS)


def job_from_mapping(doc: object, *, submitted: float | None = None) -> JobSpec:
    """Validate a parsed YAML/JSON document and build the JobSpec, or raise SpecError.

    `submitted`: the wall-clock time the job was submitted (a recovered job), so a
    deadline written as a time stays the same number of seconds after submission.
    """
    if not isinstance(doc, Mapping):
        raise SpecError("job", "the job document must be a mapping", "start with `apiVersion: trainmaster/v1`")
    try:
        model = _Document.model_validate(doc)
    except ValidationError as exc:
        raise first_error(exc, model=_Document) from None
    meta, spec = model.metadata, model.spec
    if not _NAME.match(meta.name):
        raise SpecError("metadata.name", f"{shown(meta.name)} is not a valid name",
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
    estimate = None if spec.estimate is None else parse_duration(spec.estimate, "spec.estimate", ESTIMATE_SECONDS)
    every = spec.checkpoint.every
    auto = every is None or (isinstance(every, str) and every.strip().lower() == "auto")
    checkpoint_every = DEFAULT_CHECKPOINT if auto else parse_duration(every, "spec.checkpoint.every")
    if spec.budget is not None and spec.budget <= 0:
        raise SpecError("spec.budget", "must be more than 0 dollars", "give the dollars the job may spend, or drop it")
    deadline = None if spec.deadline is None else parse_deadline(spec.deadline, now=submitted)
    adaptive = _batch_range(spec.adaptive_batch, kind, architecture)
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
        gpu_types=tuple(dict.fromkeys(spec.gpu_types)),
        checkpoint_every=checkpoint_every,
        checkpoint_auto=auto,
        require_gpu_types=tuple(dict.fromkeys(spec.require_gpu_types)),
        anchors_on_demand=spec.anchors_on_demand,
        budget=spec.budget,
        deadline=deadline,
        max_restarts=spec.max_restarts,
        kind=kind,
        estimate=estimate,
        job_type=spec.job_type,
        env=tuple(sorted(spec.env.items())),
        labels=tuple(sorted(meta.labels.items())),
        after=tuple(dict.fromkeys(spec.after)),
        adaptive_batch=adaptive,
    )


def _batch_range(raw: _AdaptiveBatch | None, kind: JobKind, architecture: Architecture) -> BatchRange | None:
    """`spec.adaptiveBatch` checked: min <= base <= max, all-reduce training jobs only."""
    if raw is None:
        return None
    field = "spec.adaptiveBatch"
    if kind is not JobKind.TRAINING or architecture is not Architecture.ALLREDUCE:
        raise SpecError(field, "only all-reduce training jobs adapt their batch size",
                        "remove adaptiveBatch, or use architecture: allreduce and kind: training")
    if raw.min > raw.max:
        raise SpecError(f"{field}.min", f"min ({raw.min}) is larger than max ({raw.max})", "make min <= max")
    base = raw.min if raw.base is None else raw.base
    if not raw.min <= base <= raw.max:
        raise SpecError(f"{field}.base", f"base ({base}) is outside min..max ({raw.min}..{raw.max})",
                        "set base to the batch your learning rate was tuned for, within min..max")
    return BatchRange(min=raw.min, max=raw.max, base=base, local_max=raw.local_max)


def load_yaml_text(text: str, where: str = "job") -> object:
    """Parse YAML, turning syntax errors into one line with the position."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(where, f"malformed YAML{at}: {problem}", "fix the YAML syntax") from None
    except RecursionError:
        raise SpecError(where, "the YAML is nested too deeply", "flatten the document") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a value PyYAML matched but cannot build (a huge int)
        raise SpecError(where, f"malformed YAML: {str(exc).splitlines()[0][:200]}", "fix the value") from None


def resolve_workdir(doc: object, folder: str | Path) -> object:
    """Anchor the job's paths to the folder of the YAML it came from, never to the daemon's working directory.

    A missing `spec.workdir` becomes `folder` (absolute); a relative one is joined
    to it. The command runs in the workdir, so `command: [python, train.py]` next
    to the YAML works wherever the daemon was started. Anything malformed is
    left as it is for the validation to name.
    """
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if isinstance(spec, dict):
        workdir = spec.get("workdir")
        base = Path(folder).resolve()
        if workdir is None:
            spec["workdir"] = str(base)
        elif isinstance(workdir, str) and workdir and "\0" not in workdir:
            spec["workdir"] = os.path.normpath(base / workdir)
    return doc


def read_job_document(path: str | Path) -> object:
    """A job YAML file as a document, its workdir resolved against the file's folder."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(p), "no such file", "check the path to the job YAML")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(str(p), f"cannot read it ({exc.__class__.__name__})",
                        "pass a readable UTF-8 YAML file") from None
    return resolve_workdir(load_yaml_text(text, str(p)), p.parent)


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a job YAML file (its workdir resolved against the file's folder)."""
    return job_from_mapping(read_job_document(path))


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set a.b.c=value` overrides (value parsed as YAML) to a job document."""
    for item in overrides:
        if "=" not in item:
            raise SpecError("--set", f"{shown(item)} has no '='", "write --set spec.roles.worker.max=4")
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
