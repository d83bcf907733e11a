"""Run every command of README's tour as a new user would, and say which fail.

    python scripts/check_readme_tour.py [--timeout 1800] [--list] [--keep]

The commands are the lines of the fenced ``bash`` blocks under README's "Command line"
heading (the tour and "Your own matrices"), in order, each run with bash in one temporary
directory laid out as the tour expects: the working directory holds a link to the
repository's ``data/`` (``data import data/records``), and its parent a link to the shared
matrices (``../shared``, from ``$COGNATE_SHARED`` or the repository's ``../shared``).
``COGNATE_HOME`` is a fresh folder inside it; the virtualenv's ``bin`` leads PATH, so
``cognate`` is the repository's. The set-up commands above the tour (``scripts/setup.sh``)
are not run: they are what makes ``.venv`` exist.

The commands in ``SKIPPED`` (``cognate evaluate``: the transfer evaluation, about an hour
per op) are reported as skipped, not run. Exit status 0 when every command that ran passed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Command line"
# Commands the check does not run, and why (a prefix of the command line).
SKIPPED = {"cognate evaluate": "the transfer evaluation takes about an hour per op"}


def tour_commands(readme: Path = ROOT / "README.md") -> list[str]:
    """The command lines of the fenced bash blocks in README's "Command line" section."""
    text = readme.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end >= 0 else len(text)]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def skip_reason(command: str) -> str | None:
    for prefix, why in SKIPPED.items():
        if command.startswith(prefix):
            return why
    return None


def shared_dir() -> Path:
    env = os.environ.get("COGNATE_SHARED")
    return Path(env) if env else ROOT.parent / "shared"


def workspace(tmp: Path) -> tuple[Path, dict[str, str]]:
    """The working directory and environment the tour runs in (see the module text)."""
    work = tmp / "work"
    work.mkdir()
    (work / "data").symlink_to(ROOT / "data")
    if shared_dir().is_dir():
        (tmp / "shared").symlink_to(shared_dir().resolve())
    env = dict(os.environ)
    env["COGNATE_HOME"] = str(tmp / "home")
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return work, env


def run(command: str, work: Path, env: dict[str, str], timeout: float) -> tuple[bool, str]:
    """Run one command line with bash; (passed, a line saying how it went)."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    took = time.monotonic() - started
    if done.returncode == 0:
        return True, f"ok ({took:.0f} s)"
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
    return False, f"exit {done.returncode} ({took:.0f} s): {tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per command")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    commands = tour_commands()
    if args.list:
        for command in commands:
            why = skip_reason(command)
            print(f"{command}" + (f"    [skipped: {why}]" if why else ""))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="cognate-tour-"))
    failed = 0
    try:
        work, env = workspace(tmp)
        for number, command in enumerate(commands, 1):
            why = skip_reason(command)
            if why:
                print(f"[{number}/{len(commands)}] skipped ({why}): {command}", flush=True)
                continue
            ok, line = run(command, work, env, args.timeout)
            failed += not ok
            print(f"[{number}/{len(commands)}] {line}: {command}", flush=True)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{len(commands)} commands: {failed} failed" if failed else f"{len(commands)} commands: ok"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
