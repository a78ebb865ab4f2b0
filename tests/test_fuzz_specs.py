"""Property-based fuzzing of the job, queue and cluster loaders (hypothesis, derandomized, bounded).

Arbitrary documents and mutations of valid ones (wrong types, NaN/inf/huge numbers, unicode, deep nesting,
unknown and missing fields) must give a valid spec or a one-line `SpecError` naming a field, never another
exception. Examples per target and errors seen are recorded in BENCHMARKS.md ("Fuzzing").
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fuzz_strategies import VALID_CLUSTER, VALID_JOB, VALID_QUEUES, deep, documents, fuzz, mutated
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.errors import SpecError, TrainmasterError
from trainmaster.core.queue import queues_from_mapping
from trainmaster.core.spec import job_from_mapping, load_yaml_text
from trainmaster.workloads.clusters import load_cluster

EXAMPLES = 150


def only_spec_errors(load: Any, doc: Any) -> None:
    try:
        load(doc)
    except SpecError as exc:
        text = str(exc)
        assert exc.field, text
        assert "\n" not in text and len(text) < 400, text
    except TrainmasterError as exc:  # pragma: no cover - would fail the next line
        raise AssertionError(f"a TrainmasterError without a field: {exc}") from None


def test_the_valid_documents_load() -> None:
    assert job_from_mapping(VALID_JOB).name == "fuzz"
    assert set(queues_from_mapping(VALID_QUEUES)) == {"org", "team"}
    assert len(cluster_from_mapping(VALID_CLUSTER)) == 2


@fuzz(EXAMPLES)
@given(st.one_of(documents(), mutated(VALID_JOB)))
def test_job_loader(doc: Any) -> None:
    only_spec_errors(job_from_mapping, doc)


@fuzz(EXAMPLES)
@given(st.one_of(documents(), mutated(VALID_QUEUES)))
def test_queue_loader(doc: Any) -> None:
    only_spec_errors(queues_from_mapping, doc)


@fuzz(EXAMPLES)
@given(st.one_of(documents(), mutated(VALID_CLUSTER)))
def test_cluster_loader(doc: Any) -> None:
    only_spec_errors(cluster_from_mapping, doc)


@fuzz(EXAMPLES)
@given(st.one_of(st.text(max_size=200), mutated(VALID_JOB, nest=False).map(yaml.safe_dump),
                 st.sampled_from([100, 1200]).map(lambda n: "a: " + "[" * n + "]" * n)))
def test_yaml_text_then_job_loader(text: str) -> None:
    try:
        doc = load_yaml_text(text, "job")
    except SpecError as exc:
        assert exc.field == "job" and "\n" not in str(exc)
        return
    only_spec_errors(job_from_mapping, doc)


@fuzz(EXAMPLES)
@given(st.one_of(st.text(max_size=30),  # node counts small (a valid 99999-node cluster takes a while to build) or huge
                 st.from_regex(r"\A([0-9]{1,3}|[0-9]{6,12})x[0-9]{1,12}(:[a-z0-9]{1,5})?(\+[0-9]{1,2}x[0-9])?\Z")))
def test_cluster_shorthand(text: str) -> None:
    only_spec_errors(load_cluster, text.replace("/", "_"))  # no paths: this fuzzes the shorthand


def test_deep_nesting_everywhere() -> None:
    for load in (job_from_mapping, queues_from_mapping, cluster_from_mapping):
        for depth in (100, 5000):
            only_spec_errors(load, {"spec": deep(depth), "queues": deep(depth), "nodes": deep(depth)})

