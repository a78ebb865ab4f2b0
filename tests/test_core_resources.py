"""Resources: exact arithmetic and parsing with clear errors."""

from __future__ import annotations

import pytest

from trainmaster.core.errors import SpecError
from trainmaster.core.resources import Resources, parse_cpu, parse_memory


@pytest.mark.parametrize(("text", "expected"), [
    ("16Gi", 16 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), (1024, 1024), ("1.5Gi", 3 * 2**29),
])
def test_memory_units(text: object, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(("text", "expected"), [(4, 4000), ("500m", 500), ("0.5", 500), (2.25, 2250)])
def test_cpu_units(text: object, expected: int) -> None:
    assert parse_cpu(text) == expected


@pytest.mark.parametrize("bad", ["lots", "-1Gi", True, "16GB"])
def test_bad_memory_names_the_field(bad: object) -> None:
    with pytest.raises(SpecError) as err:
        parse_memory(bad, "spec.roles.worker.resources.memory")
    assert "spec.roles.worker.resources.memory" in str(err.value)


def test_arithmetic_is_exact() -> None:
    a = Resources(cpu=100, memory=3, gpu=1)
    total = Resources()
    for _ in range(10):
        total = total + a
    assert total == a * 10 == Resources(cpu=1000, memory=30, gpu=10)
    assert total - a * 10 == Resources()
    assert a.fits_in(total) and not total.fits_in(a)


def test_dominant_share_and_counts() -> None:
    total = Resources(cpu=10_000, memory=100, gpu=4)
    assert Resources(cpu=5000, gpu=1).dominant_share(total) == 0.5
    assert Resources(gpu=1, cpu=1000).max_count_in(total) == 4
    assert Resources(cpu=3000).max_count_in(total) == 3


def test_parse_rejects_unknown_and_negative() -> None:
    with pytest.raises(SpecError, match=r"res\.tpu: unknown resource"):
        Resources.parse({"tpu": 1}, "res")
    with pytest.raises(SpecError, match=r"res\.gpu: must not be negative"):
        Resources.parse({"gpu": -1}, "res")
