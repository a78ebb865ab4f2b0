"""`Versioned`: the controller's models (and the waiting jobs' groups) as a dict whose versions, one per snapshot,
cost O(1) to take and read as the dict did when taken, whatever was written after."""

from __future__ import annotations

import random

import pytest

from trainmaster.controller.views import Version, Versioned


def test_each_version_reads_as_the_dict_did_when_taken() -> None:
    rng = random.Random(7)
    live: Versioned[str, int] = Versioned()
    plain: dict[str, int] = {}
    taken: list[tuple[Version[str, int], dict[str, int]]] = []
    for step in range(5000):
        key = f"j{rng.randrange(300)}"
        if rng.random() < 0.3 and key in plain:
            assert live.pop(key) == plain.pop(key)
        elif rng.random() < 0.05 and key in plain:
            del live[key], plain[key]
        else:
            live[key] = plain[key] = step
        assert len(live) == len(plain) and (key in live) == (key in plain) and live.get(key) == plain.get(key)
        if step % 29 == 0:
            version = live.version()
            assert list(version) == list(plain)  # (the newest reads the live dict, in its order)
            taken.append((version, dict(plain)))
        if step % 211 == 0 and taken:  # an older version read midway (its dict built and kept), then on
            old, then = taken[rng.randrange(len(taken))]
            assert dict(old.items()) == then and len(old) == len(then)
        if step % 97 == 0 and taken:
            taken.pop(rng.randrange(len(taken)))  # a version no one holds any more goes (its log with it)
    for version, then in taken:
        assert len(version) == len(then) and dict(version.items()) == then and set(version) == set(then)
        for key in ("j1", "j77", "j299", "nope"):
            assert version.get(key) == then.get(key) and (key in version) == (key in then)
            if key in then:
                assert version[key] == then[key]
            else:
                with pytest.raises(KeyError):
                    version[key]


def test_a_version_is_taken_again_only_after_a_write() -> None:
    live: Versioned[str, int] = Versioned()
    live["a"] = 1
    first = live.version()
    assert live.version() is first  # nothing written: the same state, the same version
    live["a"] = 1
    second = live.version()
    assert second is not first and first["a"] == second["a"] == 1
    live.pop("a")
    assert first.get("a") == second.get("a") == 1 and "a" not in live.version() and live.pop("a", None) is None
    with pytest.raises(KeyError):
        live.pop("a")
    with pytest.raises(KeyError):
        del live["a"]
