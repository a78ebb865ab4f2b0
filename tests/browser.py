"""A real headless browser for the dashboard tests and bench: Debian's chromium driven by Playwright.

Nothing is downloaded: Playwright is pointed at the system browser
(`apt-get install chromium`; never `playwright install`). `TM_CHROMIUM`
names another binary. Screenshots go to `TM_ARTIFACTS` (default
tests/artifacts/, git-ignored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ARTIFACTS = Path(os.environ.get("TM_ARTIFACTS") or Path(__file__).resolve().parent / "artifacts")


def chromium_path() -> str | None:
    given = os.environ.get("TM_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def why_not() -> str | None:
    """Why no browser test can run here (None when one can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; do not run `playwright install`)"
    if chromium_path() is None:
        return "no chromium on this machine (apt-get install chromium, or set TM_CHROMIUM to a binary)"
    return None


@contextmanager
def browser_page(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A fresh page in a headless chromium; page errors fail loudly instead of passing silently."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.errors = errors
            yield page
        finally:
            browser.close()


def screenshot(page: Any, name: str, full_page: bool = False) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    return path
