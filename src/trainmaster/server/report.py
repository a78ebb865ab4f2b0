"""One HTML page for both faces: the live dashboard (`/`) and the static `simulate --out` report.

The page is `static/index.html` with the stylesheet and the script inlined, so
it is a single self-contained file: the daemon serves it without a static route
and a simulated run can be shared as one `index.html`. With `data`, the run is
embedded as JSON and the script renders it without a server; without, the
script polls the daemon's `/v1` API.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from html import escape
from importlib.resources import files
from typing import Any


@cache
def _asset(name: str) -> str:
    return (files("trainmaster.server") / "static" / name).read_text(encoding="utf-8")


def embed_json(data: Mapping[str, Any]) -> str:
    """JSON safe inside a <script> element: no `</script>` or `<!--` can close or confuse it."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(data: Mapping[str, Any] | None = None, title: str = "trainmaster") -> str:
    """The dashboard page: live when `data` is None, else a static report of the embedded run."""
    block = "" if data is None else f'<script id="tm-data" type="application/json">{embed_json(data)}</script>'
    return (_asset("index.html")
            .replace("TM_TITLE", escape(title))
            .replace("/*TM_CSS*/", _asset("dashboard.css"))
            .replace("/*TM_JS*/", _asset("dashboard.js"))
            .replace("<!--TM_DATA-->", block))  # last: nothing scans the embedded data
