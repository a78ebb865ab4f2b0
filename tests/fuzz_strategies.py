"""Hypothesis strategies for the fuzz tests: arbitrary JSON/YAML-like documents and mutations of valid ones."""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


# Deterministic and bounded, so `make test` is reproducible and the whole fuzz run stays under a minute here.
def fuzz(examples: int) -> settings:
    return settings(derandomize=True, database=None, deadline=None, max_examples=examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])

NASTY_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 10**30, -(10**30), 2**63, 2**64,
                                 99999999999999999999, 0, -1, 1, 0.5, -0.0, 1e-320, True, False])
NASTY_TEXT = st.sampled_from(["", " ", "\0", "a\0b", "-1", "1e400", "nan", "inf", "9" * 5000, "9" * 30 + "Ti",
                              "1e3m", "500m", "16Gi", "2h", "-5s", "é", "💥", "\ud800", "../../etc/passwd", "/",
                              "x" * 5000, "python", "sh", "${HOME}", "0x10", "1_000"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20), NASTY_NUMBERS, NASTY_TEXT)


def documents(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Any JSON-like value: scalars, lists and string-keyed mappings, nested."""
    return st.recursive(SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=12), NASTY_TEXT), inner, max_size=4)),
        max_leaves=max_leaves)


def deep(depth: int) -> Any:
    """A document nested `depth` levels (lists in mappings)."""
    doc: Any = 1
    for i in range(depth):
        doc = {"spec": [doc]} if i % 2 else [doc]
    return doc


VALID_JOB: dict[str, Any] = {
    "apiVersion": "trainmaster/v1", "kind": "TrainingJob",
    "metadata": {"name": "fuzz", "queue": "default", "priority": 1, "labels": {"team": "a"}},
    "spec": {"command": ["sh", "-c", "true"], "architecture": "parameter-server",
             "roles": {"worker": {"min": 1, "max": 2, "resources": {"cpu": 1, "memory": "64Mi", "gpu": 0}},
                       "ps": {"min": 1, "max": 1, "resources": {"cpu": "500m"}}},
             "target": {"steps": 10, "epochs": 1, "loss": 0.1, "plateau": 0.01, "window": 5},
             "transient": "allowed", "gpuTypes": ["v100"], "checkpoint": {"every": "5s"}, "maxRestarts": 1,
             "kind": "training", "estimate": "1h", "jobType": "t", "env": {"A": "b"}},
}
VALID_QUEUES: dict[str, Any] = {"queues": [
    {"name": "org", "weight": 2, "quota": {"gpu": 8, "cpu": 64, "memory": "256Gi"}, "gpuTypes": {"v100": 4},
     "priority": 1, "borrowing": False},
    {"name": "team", "parent": "org", "quota": {"gpu": 4, "cpu": 32, "memory": "128Gi"}},
]}
VALID_CLUSTER: dict[str, Any] = {"nodes": [
    {"name": "a", "count": 2, "gpu": 4, "gpuType": "v100", "cpu": 32, "memory": "128Gi", "zone": "z",
     "transient": True, "pricePerHour": 0.7, "labels": {"rack": "r1"}},
]}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if len(prefix) >= 6:  # not into what a mutation nested deeply
        return out
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any], nest: bool = True) -> Any:
    """A valid document with one to three fields replaced (wrong types, NaN/inf/huge, unicode, deep nesting),
    deleted, or joined by an unknown one."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", *(["deep"] if nest else [])]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.one_of(st.text(max_size=8), NASTY_TEXT))] = draw(SCALARS)
        elif action == "deep":
            parent[path[-1]] = deep(draw(st.sampled_from([50, 400, 1500])))
        else:
            parent[path[-1]] = draw(st.one_of(SCALARS, documents(8)))
    return doc
