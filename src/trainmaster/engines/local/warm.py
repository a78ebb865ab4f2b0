"""A pre-started Python task: imports torch now, runs a job's script when the engine sends one.

`python -m trainmaster.engines.local.warm` blocks on one JSON line on stdin
(`argv` after `python`, `cwd`, `env`, `log`), then becomes that task: the
environment, working directory and log file are swapped in and the script
runs as `__main__`, exactly as `python <argv>` would, minus the seconds of
`import torch`. If the engine goes away first, stdin closes and it exits.
Like the engine's shell wrapper, it leaves the task's exit code in `exit_file`.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback

import torch  # noqa: F401  (the reason this process exists: pay for the import before a task needs it)


def become(request: dict[str, object]) -> None:
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(str(request["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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


def exit_code(exc: SystemExit) -> int:
    """The status `sys.exit(arg)` gives the shell: None is 0, an int itself, anything else 1."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def record_exit(path: str, code: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, path)


def main() -> None:
    line = sys.stdin.readline()
    if not line.strip():
        return  # the engine closed without using this process
    request = json.loads(line)
    pid_file = str(request.get("pid_file") or "")
    deadline = time.monotonic() + 5.0  # run only once the engine has recorded this process (see tasks.WRAPPER)
    while pid_file and not os.path.exists(pid_file):
        if time.monotonic() > deadline:
            raise SystemExit(70)
        time.sleep(0.01)
    code = 0
    try:
        become(request)
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if request.get("exit_file"):
        record_exit(str(request["exit_file"]), code)
    raise SystemExit(code)  # ends as `python script.py` would: atexit handlers, non-daemon threads joined


if __name__ == "__main__":
    main()
