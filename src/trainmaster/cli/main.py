"""`trainmaster` entry point: one subcommand per module, errors as one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from trainmaster.cli.examples import add_examples
from trainmaster.core.errors import TrainmasterError

# Each module has `register(subparsers)`, which adds its parser with `func` set. Every call builds every
# parser, so these modules import only what their options need; a command imports the rest when it runs
# (tests/test_cli_format.py pins that no controller, numpy or httpx loads with the parser).
COMMANDS = (
    "trainmaster.cli.simulate_cmd",
    "trainmaster.cli.jobs",
    "trainmaster.cli.control",  # hold, release, update
    "trainmaster.cli.history",
    "trainmaster.cli.sbatch",  # after cli.jobs: adds --after and --array to its `submit`
    "trainmaster.cli.watch",  # after cli.jobs: adds --watch to its `queue`
    "trainmaster.cli.server_cmd",
    "trainmaster.cli.why",  # after cli.jobs: extends its live `why` with simulated runs
)

EXIT_USAGE = 2
TOKEN_ENV = "TRAINMASTER_TOKEN"  # what the SDK reads (trainmaster.cli.client); the flags below set it


def _version() -> str:
    try:
        return version("trainmaster")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainmaster", description="Schedule distributed training jobs.")
    parser.add_argument("--version", action="version", version=f"trainmaster {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    for p in sub.choices.values():  # every command that talks to a server takes its token too
        if any(a.dest == "url" for a in p._actions):
            g = p.add_argument_group("authentication (when the server has a token)")
            g.add_argument("--token", default=None, help=f"the API token (default: {TOKEN_ENV})")
            g.add_argument("--token-file", dest="client_token_file", default=None, metavar="FILE",
                           help="a file holding the API token (first line)")
    add_examples(sub)
    return parser


def _use_token(args: argparse.Namespace) -> None:
    """`--token` / `--token-file` win over TRAINMASTER_TOKEN for this run's requests."""
    token: str | None = getattr(args, "token", None)
    path = getattr(args, "client_token_file", None)
    if path is not None:
        from trainmaster.server.auth import read_token  # the one token-file reader

        token = read_token(path)
    if token:
        os.environ[TOKEN_ENV] = token


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _use_token(args)
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
