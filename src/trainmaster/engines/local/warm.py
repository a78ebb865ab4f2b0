"""A pre-started Python task: imports torch now, runs a job's script when the engine sends one.

`python -m trainmaster.engines.local.warm` blocks on one JSON line on stdin
(`argv` after `python`, `cwd`, `env`, `log`), then becomes that task: the
environment, working directory and log file are swapped in and the script
runs as `__main__`, exactly as `python <argv>` would, minus the seconds of
`import torch`. If the engine goes away first, stdin closes and it exits.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import torch  # noqa: F401  (the reason this process exists: pay for the import before a task needs it)


def become(request: dict[str, object]) -> None:
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(str(request["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def main() -> None:
    line = sys.stdin.readline()
    if not line.strip():
        return  # the engine closed without using this process
    become(json.loads(line))


if __name__ == "__main__":
    main()
