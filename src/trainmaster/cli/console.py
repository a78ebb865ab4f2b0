"""Where tables are printed: fitted to a terminal, never folded or cut when piped.

On a terminal rich fits a table to the width and a cell it must cut ends in
an ellipsis (columns made with `LONG`). Piped into a file, `grep` or `less`,
every row is one whole line however long: scripts never see a folded or
silently truncated reason.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

WIDE = 1 << 16  # columns when piped: wider than any row, so nothing folds
LONG: dict[str, Any] = {"overflow": "ellipsis", "no_wrap": True}  # a free-text column (reasons, messages)


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=WIDE)
