"""The timing lock and job markers live in /tmp, which anyone may write: a planted link or a
folder another user made first is never followed, chmod'ed or written through."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from cognate import timing

FALLBACK = f"timing-{os.geteuid()}.lock"  # the per-user lock beside the shared one
_HOLD = (
    "import time\nfrom cognate import timing\n"
    "with timing.timing_lock():\n    print('held', flush=True); time.sleep(60)"
)


@pytest.fixture(autouse=True)
def private_paths(tmp_path, monkeypatch):
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))
    getattr(timing, "_WARNED", set()).clear()


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _foreign(path, monkeypatch) -> None:
    """Make ``path`` another user's: chown where we may, else pretend to be someone else."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534, follow_symlinks=False)
    else:
        real = os.geteuid()
        monkeypatch.setattr(timing.os, "geteuid", lambda: real + 1)


def _held_elsewhere_by_child() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_planted_lock_link_is_not_followed_and_its_target_keeps_its_mode(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    victim.chmod(0o600)
    os.symlink(victim, tmp_path / "timing.lock")
    with timing.timing_lock(wait_s=5):
        pass
    assert _mode(victim) == 0o600 and victim.read_text() == "mine"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link" in err[0] and FALLBACK in err[0]
    assert stat.S_ISREG(os.lstat(tmp_path / FALLBACK).st_mode)


def test_the_fallback_lock_still_excludes_another_process(tmp_path):
    os.symlink(tmp_path / "elsewhere", tmp_path / "timing.lock")
    proc = _held_elsewhere_by_child()
    try:
        assert timing.lock_held_elsewhere()
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "elsewhere").exists()


def test_a_fifo_at_the_lock_neither_hangs_nor_is_used(tmp_path, capsys):
    os.mkfifo(tmp_path / "timing.lock")
    with timing.timing_lock(wait_s=5):
        pass
    assert "is not a regular file" in capsys.readouterr().err


def test_a_lock_we_create_is_open_to_all_but_an_existing_one_keeps_its_mode(tmp_path, monkeypatch):
    old = os.umask(0o022)
    try:
        with timing.timing_lock(wait_s=5):
            pass
    finally:
        os.umask(old)
    assert _mode(tmp_path / "timing.lock") == 0o666  # other users must be able to lock it
    other = tmp_path / "other.lock"
    other.write_text("")
    other.chmod(0o644)
    _foreign(other, monkeypatch)
    monkeypatch.setenv(timing.LOCK_ENV, str(other))
    proc = _held_elsewhere_by_child()  # another user's 644 lock still coordinates
    try:
        assert timing.lock_held_elsewhere()
    finally:
        proc.kill()
        proc.wait()
    assert _mode(other) == 0o644


def test_no_usable_lock_at_all_is_one_warning_not_an_error(tmp_path, monkeypatch, capsys):
    os.symlink(tmp_path / "a", tmp_path / "timing.lock")
    os.symlink(tmp_path / "b", tmp_path / FALLBACK)
    with timing.timing_lock(wait_s=5):
        pass
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "timing without the lock" in err[0]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_jobs_folder_of_another_user_is_not_written_to(tmp_path, monkeypatch, capsys):
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o777)
    jobs.chmod(0o777)
    _foreign(jobs, monkeypatch)
    with timing.job_marker("collect-spade"):
        assert os.listdir(jobs) == []
        assert timing.other_jobs() == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "owned by another user" in err[0] and "not marked" in err[0]


def test_a_jobs_folder_link_is_not_followed(tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    os.symlink(target, tmp_path / "jobs")
    with timing.job_marker("collect-spade"):
        assert timing.other_jobs() == []
    assert os.listdir(target) == ["keep.txt"]  # nothing made, nothing "stale" removed
    assert "is a symbolic link" in capsys.readouterr().err


def test_a_jobs_folder_we_make_is_private(tmp_path):
    with timing.job_marker("collect-spade"):
        assert _mode(tmp_path / "jobs") == 0o700
        assert os.listdir(tmp_path / "jobs") == [f"{os.getpid()}.collect-spade"]
    assert os.listdir(tmp_path / "jobs") == []


def test_the_default_jobs_folder_is_per_user(monkeypatch):
    monkeypatch.delenv(timing.JOBS_ENV)
    assert timing.jobs_dir().name == f"cognate-jobs-{os.geteuid()}"
