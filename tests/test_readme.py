"""README agrees with the code: its synth kinds, the targets the commands offer, the
example's backends; its tour runs on files it makes (scripts/check_readme_tour.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cognate.cli import run as cli_run
from cognate.synth import ALL_KINDS, PUBLISHED_KINDS
from cognate.targets import KNOWN_TARGETS, target_names

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
TEXT = " ".join(README.split())


def help_text(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli_run([*args, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_readme_names_every_synth_kind_and_counts_them(capsys) -> None:
    kinds = (*ALL_KINDS, *PUBLISHED_KINDS)
    counted = re.findall(r"generated matrices, (\d+) kinds", TEXT)
    assert counted == [str(len(kinds))]
    row = next(line for line in README.splitlines() if "`cognate data synth KIND" in line)
    assert all(re.search(rf"\b{re.escape(k)}\b", row) for k in kinds), row
    shown = help_text(["data", "synth"], capsys)
    assert all(k in shown for k in kinds)


@pytest.mark.parametrize("command", [["collect"], ["tune"], ["pretrain"], ["finetune"]])
def test_every_command_offers_every_registered_target(command, capsys) -> None:
    text = help_text(command, capsys)
    assert all(name in text for name in target_names()), (command, text)


def test_readme_mentions_every_shipped_target() -> None:
    assert all(f"`{name}`" in TEXT or f"**{name}**" in TEXT for name in KNOWN_TARGETS)


def test_readme_lists_the_example_s_backends() -> None:
    from cognate.torch.gnn import BACKENDS

    assert f"`--backend {'|'.join(BACKENDS)}" in TEXT
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "gcn.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and all(b in done.stdout for b in BACKENDS)


def test_gitignore_covers_the_store_and_its_side_files() -> None:
    ignore = (ROOT / ".gitignore").read_text().split()
    for pattern in ("*.sqlite", "*.sqlite-wal", "*.sqlite-shm", "*.db", "*.db-wal", "*.db-shm"):
        assert pattern in ignore


def test_the_tour_reads_only_files_it_makes_or_the_repository_holds() -> None:
    """Every path argument of the tour is made by an earlier tour command, is in the
    repository, or is one of the shared matrices the tour names; evaluate is skipped."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from check_readme_tour import skip_reason, tour_commands
    finally:
        sys.path.pop(0)
    commands = tour_commands()
    assert any(c.startswith("cognate tune") and "--model" in c for c in commands)
    assert any("--from-json" in c for c in commands)
    assert [c for c in commands if skip_reason(c)] == [
        next(c for c in commands if c.startswith("cognate evaluate"))
    ]
    made: set[str] = set()
    for command in commands:
        words = command.split("#")[0].split()
        for i, word in enumerate(words):
            if word in ("-o", ">", "--db", "--emit") and i + 1 < len(words):
                made.add(words[i + 1])
        for word in words:
            if re.fullmatch(r"[\w./-]+\.(npz|mtx\.gz|json|sqlite|safetensors)", word):
                known = word in made or (ROOT / word).exists() or word.startswith("mine/")
                assert known, f"{word} in `{command}` is not made by the tour"


@pytest.mark.slow
def test_the_readme_tour_runs(tmp_path: Path) -> None:
    """The whole tour, as a new user runs it (4.5 minutes on 2 busy cores)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_readme_tour.py"), "--timeout", "1500"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
