"""cognate.util: atomic writes, YAML loading, one-line messages."""

from __future__ import annotations

import os
import threading

import pytest

from cognate.errors import CognateError
from cognate.util import atomic_stream, atomic_write, describe, load_yaml, one_line


def test_one_line_folds_whitespace_and_cuts() -> None:
    assert one_line("a\n  b\tc\n") == "a b c"
    assert one_line("x" * 50, limit=10) == "x" * 10


def test_describe_names_the_class() -> None:
    assert describe(ValueError("bad\nvalue")) == "ValueError: bad value"
    assert describe(KeyError()) == "KeyError: no message"


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path) -> None:
    path = tmp_path / "sub" / "f.txt"
    atomic_write(path, "one")
    atomic_write(path, b"two")
    assert path.read_text() == "two"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.txt"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path) -> None:
    path = tmp_path / "f.bin"
    atomic_write(path, b"old")

    def broken(f) -> None:
        f.write(b"half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        atomic_stream(path, broken)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_concurrent_writers_never_leave_a_mixed_file(tmp_path) -> None:
    path = tmp_path / "shared.bin"
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    threads = [threading.Thread(target=atomic_write, args=(path, p)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_bytes() in payloads
    assert os.listdir(tmp_path) == ["shared.bin"]


def test_load_yaml_errors_are_one_line(tmp_path) -> None:
    good = tmp_path / "a.yaml"
    good.write_text("a: 1\nb: [2, 3]\n")
    assert load_yaml(good) == {"a": 1, "b": [2, 3]}
    bad = tmp_path / "b.yaml"
    bad.write_text("a: [1, 2\nb: :\n")
    with pytest.raises(CognateError) as err:
        load_yaml(bad, "space file")
    assert str(err.value).startswith(f"{bad}: malformed space file:")
    assert "\n" not in str(err.value)
    with pytest.raises(CognateError, match="cannot read"):
        load_yaml(tmp_path / "missing.yaml")
