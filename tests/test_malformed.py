"""Bad matrix files through the real CLI: exit 1, one stderr line naming file and problem.

The committed corpus lives in tests/data/malformed/; archives and damaged gzip files are
built here from a real shared matrix. Every file goes through the CLI's entry point in its
own (forked) process; a few also through ``python -m cognate`` as a user types it.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

CORPUS = Path(__file__).parent / "data" / "malformed"


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


# file in CORPUS -> what the error line must say about the problem
CORPUS_PROBLEMS = {
    "empty.mtx": r"empty file",
    "blank_lines.mtx": r"empty file",
    "garbage.mtx": r"not a Matrix Market file",
    "no_banner.mtx": r"not a Matrix Market file",
    "wrong_banner.mtx": r"header element: tensor",
    "unknown_field.mtx": r"header element: quaternion",
    "unknown_symmetry.mtx": r"header element: lopsided",
    "missing_size_line.mtx": r"line 2: .*Premature EOF",
    "negative_dims.mtx": r"can't be negative",
    "absurd_rows.mtx": r"99999999999 x 3 exceed the int32 limit",
    "absurd_nnz_int32.mtx": r"999999999999 entries exceed the int32 limit",
    "absurd_nnz_small_file.mtx": r"(declared nnz 2000000000 needs about|2000000000 entries but the file)",
    "truncated_body.mtx": r"line 4: 2 numbers, an entry of a real file has 3",
    "fewer_entries.mtx": r"truncated file\. Expected another 1 lines",
    "more_entries.mtx": r"line 4: Too many lines",
    "index_zero.mtx": r"line 3: Row index out of bounds",
    "row_out_of_range.mtx": r"line 4: Row index out of bounds",
    "col_out_of_range.mtx": r"line 4: Column index out of bounds",
    "non_numeric.mtx": r"line 4: 'two' is not a real number",
    "zero_nnz.mtx": r"no entries \(nnz = 0\)",
    "zero_rows.mtx": r"zero dimension \(0 x 3\)",
    "symmetric_nonsquare.mtx": r"symmetric matrix must be square",
    "skew_diagonal.mtx": r"skew-symmetric file stores a non-zero diagonal",
    "not_gzip.mtx.gz": r"corrupt or truncated compressed data",
    "notes.txt": r"unknown matrix format",
    "not_zip.npz": r"not a scipy \.npz file",
    "npz_dense_arrays.npz": r"does not contain a sparse array",
    "npz_index_out_of_range.npz": r"indices must be < 2",
    "npz_bad_indptr.npz": r"indptr must be a non-decreasing",
    "csr_short.csr": r"needs 44 bytes, file has 36",
    "csr_odd_size.csr": r"too short",
    "csr_rowptr_not_monotone.csr": r"rowptr does not start at 0 and increase",
    "csr_rowptr_wrong_final.csr": r"rowptr ends at 3, header says nnz = 4",
    "csr_col_out_of_range.csr": r"column index out of range",
    "csr_negative_header.csr": r"negative size",
    "csr_zero_nnz.csr": r"no entries",
    # Numbers the parser alone would misread: each refused, naming the line (1-based, in
    # the file) or the .npz array.
    "value_hex.mtx": r"Matrix Market line 4: '0x10' is not a real number",
    "value_suffix.mtx": r"Matrix Market line 3: '5abc' is not a real number",
    "value_exponent.mtx": r"Matrix Market line 3: '1e' is not a real number",
    "integer_fraction.mtx": r"Matrix Market line 4: '1\.5' is not an integer number",
    "extra_token.mtx": r"Matrix Market line 5: 4 numbers, an entry of a real file has 3",
    "pattern_value.mtx": r"Matrix Market line 4: 3 numbers, an entry of a pattern file has 2",
    "complex_one_part.mtx": r"Matrix Market line 3: 3 numbers, an entry of a complex file has 4",
    "npz_float_indices.npz": r"array 'indices' holds float64 values, not integers",
    "npz_float_coords.npz": r"array 'row' holds float64 values, not integers",
}

# built by _make_generated: name -> problem
GENERATED_PROBLEMS = {
    "corrupt.mtx.gz": r"corrupt or truncated compressed data",
    "truncated.mtx.gz": r"corrupt or truncated compressed data",
    "traversal.tar.gz": r"member '\.\./\.\./evil\.mtx' escapes the archive",
    "absolute.tar.gz": r"member '/tmp/evil\.mtx' has an absolute path",
    "symlink.tar.gz": r"member 'symlink/symlink\.mtx' is a link",
    "hardlink.tar.gz": r"member 'hardlink/copy\.mtx' is a link",
    "device.tar.gz": r"member 'device/null' is a device",
    "no_mtx.tar.gz": r"archive holds no \.mtx file",
    "not_a_tar.tar.gz": r"(not a gzip file|invalid header|truncated|bad checksum|empty file)",
    "corrupt_tar.tar.gz": r"corrupt or truncated compressed data",
    "bomb.mtx.gz": r"data go on past \d+ bytes, more than 1 declared entries need",
    "bomb.tar.gz": r"data go on past \d+ bytes, more than 1 declared entries need",
    "missing.mtx": r"no such file",
    "empty_folder": r"no matrix files",
}


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _make_generated(folder: Path, real_gz: Path) -> None:
    raw = real_gz.read_bytes()
    middle = len(raw) // 2
    (folder / "corrupt.mtx.gz").write_bytes(
        raw[:middle] + bytes(b ^ 0x5A for b in raw[middle : middle + 64]) + raw[middle + 64 :]
    )
    (folder / "truncated.mtx.gz").write_bytes(raw[:middle])
    text = gzip.decompress(raw)
    _tar(folder / "traversal.tar.gz", [(_member("../../evil.mtx"), text)])
    _tar(folder / "absolute.tar.gz", [(_member("/tmp/evil.mtx"), text)])
    _tar(
        folder / "symlink.tar.gz",
        [(_member("symlink/symlink.mtx", tarfile.SYMTYPE, "/etc/passwd"), None)],
    )
    _tar(
        folder / "hardlink.tar.gz",
        [
            (_member("hardlink/hardlink.mtx"), text),
            (_member("hardlink/copy.mtx", tarfile.LNKTYPE, "hardlink/hardlink.mtx"), None),
        ],
    )
    _tar(folder / "device.tar.gz", [(_member("device/null", tarfile.CHRTYPE), None)])
    _tar(folder / "no_mtx.tar.gz", [(_member("no_mtx/README.txt"), b"nothing here\n")])
    (folder / "not_a_tar.tar.gz").write_bytes(gzip.compress(b"plain text, not a tar archive\n"))
    good_tar = folder / "good.tar"
    _tar(good_tar, [(_member("corrupt_tar/corrupt_tar.mtx"), text)])
    tar_bytes = good_tar.read_bytes()
    good_tar.unlink()
    (folder / "corrupt_tar.tar.gz").write_bytes(tar_bytes[: len(tar_bytes) // 2])
    (folder / "empty_folder").mkdir()
    # Decompression bombs: a header declaring 1 entry, then 32 MiB of padding (~32 KiB packed).
    bomb = b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n" + b"\n" * (32 << 20)
    (folder / "bomb.mtx.gz").write_bytes(gzip.compress(bomb))
    _tar(folder / "bomb.tar.gz", [(_member("bomb/bomb.mtx"), bomb)])


# Runs cognate's console entry point (cognate.cli.run) once per path in a forked child
# whose stdout/stderr are files: the real CLI code path and exit status, with one import of
# the CLI instead of one per file (each import costs seconds on a loaded 2-core machine).
_FORK_DRIVER = """
import os, sys
from cognate.cli import run
out_dir, paths = sys.argv[1], sys.argv[2:]
for index, path in enumerate(paths):
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, suffix in ((1, "out"), (2, "err")):
            target = os.open(f"{out_dir}/{index}.{suffix}", os.O_WRONLY | os.O_CREAT, 0o644)
            os.dup2(target, fd)
        code = 0
        try:
            run(["data", "info", path])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback; traceback.print_exc(); code = 99
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    with open(f"{out_dir}/{index}.rc", "w") as rc:
        rc.write(str(os.waitstatus_to_exitcode(status)))
"""


def _environment(home: Path) -> dict[str, str]:
    env = {**os.environ, "COGNATE_HOME": str(home)}
    env.pop("COGNATE_DEBUG", None)
    return env


def _run_forked(paths: dict[str, Path], out_dir: Path, home: Path) -> dict[str, Result]:
    names = list(paths)
    subprocess.run(
        [sys.executable, "-c", _FORK_DRIVER, str(out_dir), *(str(paths[n]) for n in names)],
        env=_environment(home),
        check=True,
        timeout=300,
    )
    return {
        name: Result(
            int((out_dir / f"{i}.rc").read_text()),
            (out_dir / f"{i}.out").read_text(),
            (out_dir / f"{i}.err").read_text(),
        )
        for i, name in enumerate(names)
    }


def _run_module(path: Path, home: Path) -> Result:
    """``python -m cognate data info PATH``: the whole command as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "cognate", "data", "info", str(path)],
        capture_output=True,
        text=True,
        env=_environment(home),
        timeout=180,
    )
    return Result(result.returncode, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, shared) -> Path:
    folder = tmp_path_factory.mktemp("generated")
    _make_generated(folder, shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    return folder


def _all_paths(generated: Path) -> dict[str, Path]:
    paths = {name: CORPUS / name for name in CORPUS_PROBLEMS}
    paths.update({name: generated / name for name in GENERATED_PROBLEMS})
    return paths


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory, generated) -> dict[str, Result]:
    out_dir = tmp_path_factory.mktemp("cli-out")
    return _run_forked(_all_paths(generated), out_dir, tmp_path_factory.mktemp("home"))


def _check_one_line(path: Path, result: Result, problem: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"cognate: error: {path}: "), lines[0]
    assert "internal error" not in lines[0]
    assert re.search(problem, lines[0], flags=re.I), lines[0]


def test_corpus_is_complete():
    on_disk = {p.name for p in CORPUS.iterdir() if p.name != "README.md"}
    assert on_disk == set(CORPUS_PROBLEMS)
    assert len(on_disk) >= 15


@pytest.mark.parametrize("name", sorted(CORPUS_PROBLEMS) + sorted(GENERATED_PROBLEMS))
def test_bad_file_gives_one_clear_line(cli_results, generated, name):
    problem = {**CORPUS_PROBLEMS, **GENERATED_PROBLEMS}[name]
    _check_one_line(_all_paths(generated)[name], cli_results[name], problem)


# A few files of each family through ``python -m cognate`` itself, started concurrently.
_END_TO_END = ("truncated_body.mtx", "csr_rowptr_not_monotone.csr", "traversal.tar.gz")


def test_python_m_cognate_end_to_end(generated, tmp_path):
    paths = _all_paths(generated)
    with ThreadPoolExecutor(max_workers=len(_END_TO_END)) as pool:
        results = list(pool.map(lambda name: _run_module(paths[name], tmp_path), _END_TO_END))
    problems = {**CORPUS_PROBLEMS, **GENERATED_PROBLEMS}
    for name, result in zip(_END_TO_END, results, strict=True):
        _check_one_line(paths[name], result, problems[name])


def test_traversal_archive_extracts_nothing(cli_results, generated):
    assert cli_results["traversal.tar.gz"].returncode == 1
    assert not (generated.parent / "evil.mtx").exists()
    assert not (generated.parent.parent / "evil.mtx").exists()
