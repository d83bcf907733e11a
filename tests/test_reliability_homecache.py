"""Kernel-cache and autoencoder-cache files are read through one safe reader: a FIFO, a link
to /dev/zero, a folder, an empty or foreign file in their place is one warning and rebuilt,
never a hang, a MemoryError or a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cognate.targets import get_target
from cognate.transfer.autoencoder import AutoencoderEncoder, _cache_path

_BUILD = """
import hashlib, pathlib, sys
from cognate import build
source = "int cognate_answer(void) { return 42; }\\n"
flags = build.BASE_FLAGS
digest = hashlib.sha256((build.CC + " ".join(flags) + "\\n" + source).encode()).hexdigest()[:24]
lib = build.kernel_cache_dir() / f"k_{digest}.so"
print(lib, flush=True)
sys.stdin.readline()  # the test plants its defect now
out = build.compile_c(source, openmp=False)
assert out == lib and out.is_file() and not out.is_symlink()
print(build.load_library(str(out)).cognate_answer())
"""


def _limit_memory() -> None:  # a read of /dev/zero must end in the child, not fill the host
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _plant(path: Path, what: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "zero":
        os.symlink("/dev/zero", path)
    elif what == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("where", ["library", "manifest"])
@pytest.mark.parametrize("what", ["fifo", "zero", "folder", "empty"])
def test_a_special_file_in_the_kernel_cache_is_rebuilt(tmp_path, where, what):
    env = {**os.environ, "COGNATE_HOME": str(tmp_path)}
    args = [sys.executable, "-c", _BUILD]
    run = dict(env=env, text=True, capture_output=True, timeout=60, preexec_fn=_limit_memory)
    first = subprocess.run(args, input="\n", **run)  # a good cache entry first
    assert first.returncode == 0, first.stderr
    lib = Path(first.stdout.splitlines()[0])
    _plant(lib if where == "library" else lib.with_name(lib.name + ".sha256"), what)
    try:
        proc = subprocess.run(args, input="\n", **run)
    except subprocess.TimeoutExpired:
        pytest.fail(f"compile_c hung on a {what} at the {where}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "42"
    err = proc.stderr.strip().splitlines()
    assert len(err) <= 1 and all(line.startswith("cognate: warning: ") for line in err)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("what", ["empty", "foreign", "truncated", "folder", "fifo"])
def test_a_bad_autoencoder_cache_file_is_trained_again(what, capsys):
    space = get_target("spade").space("spmm")
    good = AutoencoderEncoder(space)
    path = _cache_path(space, good.settings)
    raw = path.read_bytes()
    path.unlink()
    if what == "foreign":
        path.write_bytes(b'\x08\x00\x00\x00\x00\x00\x00\x00{"a": 1}')
    elif what == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    else:
        _plant(path, what)
    capsys.readouterr()
    again = AutoencoderEncoder(space)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "trained again" in err[0]
    assert again.sha256 == good.sha256  # the same deterministic training
    assert path.read_bytes() == raw  # and the cache is whole again
