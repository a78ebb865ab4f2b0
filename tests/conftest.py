"""Shared fixtures: the path to ../shared/data, skipping cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED}; these tests replay the shared traces")
    return SHARED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reads ../shared/data carries the `shared` marker (`-m "not shared"` leaves them out)."""
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared)
