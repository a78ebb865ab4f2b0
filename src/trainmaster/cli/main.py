"""`trainmaster` entry point: one subcommand per module, errors as one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from trainmaster.core.errors import TrainmasterError

# Each module has `register(subparsers)`, which adds its parser with `func` set.
COMMANDS = (
    "trainmaster.cli.simulate",
    "trainmaster.cli.jobs",
    "trainmaster.cli.server_cmd",
    "trainmaster.cli.why",  # after cli.jobs: extends its live `why` with simulated runs
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainmaster", description="Schedule distributed training jobs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except TrainmasterError as exc:
        print(f"trainmaster: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", EXIT_USAGE))  # the client's errors carry 3 (not found), 4 (no server)
    except KeyboardInterrupt:
        print("trainmaster: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
