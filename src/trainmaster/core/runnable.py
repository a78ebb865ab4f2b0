"""Can this job's command start here? Checked when it is submitted, not minutes later when it is placed.

The daemon's `validate` calls `check_runnable` with the engine's base folder
(a relative `spec.workdir` is taken from it); a job that would fail at launch
is refused at once with a 4xx naming `spec.workdir` or `spec.command`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.core.job import JobSpec

PYTHONS = ("python", "python3")  # the local engine runs these under its own interpreter
_PY_OPTS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def _python_script(args: tuple[str, ...]) -> str | None:
    """The script a `python ...` command runs, or None for `-m module` / `-c code` / `-` (stdin)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or arg.startswith(("-m", "-c")):  # also `-mpkg`, `-cCODE`
            return None
        if arg in _PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg
    return ""


def check_runnable(spec: JobSpec, base_dir: Path) -> Path:
    """Raise a SpecError unless the command resolves; returns the working folder it will run in."""
    hint = "use an absolute path, or submit the YAML with the CLI or SDK, which resolve it against the YAML's folder"
    if not spec.command or not spec.command[0]:
        raise SpecError("spec.command", "is required", "add e.g. command: [python, train.py]")
    cwd = base_dir / spec.workdir if spec.workdir else base_dir
    if not os.path.isdir(cwd):  # os.path: False (not an error) for names too long for the filesystem
        where = "" if Path(spec.workdir or "").is_absolute() else f" (relative to the server's folder {base_dir})"
        raise SpecError("spec.workdir", f"{spec.workdir!r}: no such folder{where}", hint)
    program, args = spec.command[0], spec.command[1:]
    if program in PYTHONS:
        script = _python_script(args)
        if script == "":
            raise SpecError("spec.command", f"{program} without a script", "add the script, e.g. [python, train.py]")
        if script is not None and not os.path.isfile(cwd / script):
            raise SpecError("spec.command", f"{script!r}: no such file in {cwd}", hint)
        return cwd
    if "/" in program:
        path = cwd / program
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise SpecError("spec.command", f"{program!r}: no such executable in {cwd}", hint)
        return cwd
    path_var = dict(spec.env).get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(program, path=path_var) is None:
        raise SpecError("spec.command", f"{program!r} is not on the server's PATH",
                        "install it there, or give its absolute path")
    return cwd
