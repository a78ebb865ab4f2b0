"""bench/deep_profile.py: a bad --policy, --cluster or --data ends in one line naming it (exit 2), no traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench import deep_profile


@pytest.mark.parametrize(("args", "names"), [
    (["--data", "/nonexistent/philly.csv"], "/nonexistent/philly.csv: file not found"),
    pytest.param(["--cluster", "7y", "--limit", "10"], "'7y' is not a cluster spec", marks=pytest.mark.skipif(
        not deep_profile.DATA.exists(), reason=f"{deep_profile.DATA} absent (the shared Philly trace)")),
])
def test_bad_input_is_one_line_naming_the_field(args: list[str], names: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["deep_profile", *args])
    assert deep_profile.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and names in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
