"""Matrix file reading: the shared real matrices, every format, and the value policies."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from cognate.errors import CognateError, InputError
from cognate.formats.files import expand_matrix_paths
from cognate.formats.read import load_matrix
from cognate.formats.write import save_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.matrix_stats import matrix_stats

HEADER = "%%MatrixMarket matrix coordinate {field} {symmetry}\n"


def _readme_table(shared: Path) -> dict[str, dict]:
    """file -> shape, entries, kind from ../shared/matrices/README.md's tables."""
    rows = {}
    text = (shared / "matrices" / "README.md").read_text()
    pattern = r"^\| (\S+\.(?:mtx\.gz|csr)) \| (\d+) x (\d+) \| (\d+) \| ([^|]+) \|$"
    for match in re.finditer(pattern, text, flags=re.M):
        name, nrows, ncols, entries, kind = match.groups()
        rows[name] = {"shape": (int(nrows), int(ncols)), "entries": int(entries), "kind": kind}
    return rows


def _stored_diagonal(path: Path) -> int:
    """Count stored diagonal entries by reading the raw text (independent of the loader)."""
    count = 0
    with gzip.open(path, "rt") as lines:
        for line in lines:
            if line.startswith("%"):
                continue
            break  # the size line
        for line in lines:
            parts = line.split()
            count += len(parts) >= 2 and parts[0] == parts[1]
    return count


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_readme_table_lists_every_shared_file(shared, suitesparse_files, waco_files):
    table = _readme_table(shared)
    on_disk = {p.name for p in suitesparse_files + waco_files}
    assert len(on_disk) == 33
    assert set(table) == on_disk


def test_every_shared_matrix_matches_the_readme(shared, suitesparse_files, waco_files):
    table = _readme_table(shared)
    for path in suitesparse_files + waco_files:
        expected = table[path.name]
        matrix = load_matrix(path)
        assert matrix.shape == expected["shape"], path.name
        assert matrix.csr.indices.dtype == np.int32 and matrix.csr.data.dtype == np.float32
        assert matrix.csr.has_sorted_indices and matrix.csr.has_canonical_format
        if "symmetric" in expected["kind"]:
            diagonal = _stored_diagonal(path)
            assert matrix.nnz == 2 * expected["entries"] - diagonal, path.name
            assert matrix.symmetry == "symmetric"
            assert (matrix.csr != matrix.csr.T).nnz == 0  # both triangles present
        else:
            assert matrix.nnz == expected["entries"], path.name
            assert matrix.symmetry == "general"
        field = "pattern" if path.suffix == ".csr" else expected["kind"].split()[0]
        assert matrix.field == field, path.name
        assert np.isfinite(matrix.csr.data).all()


def test_symmetric_values_match_scipy(shared):
    path = shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz"
    reference = sp.csr_matrix(scipy.io.mmread(path)).astype(np.float32)
    matrix = load_matrix(path)
    assert abs(matrix.csr - reference).max() == 0


def test_complex_keeps_the_real_part(shared):
    path = shared / "matrices" / "suitesparse" / "young1c.mtx.gz"
    reference = sp.coo_matrix(scipy.io.mmread(path))
    matrix = load_matrix(path)
    assert matrix.field == "complex"
    expected = sp.csr_matrix((reference.data.real, (reference.row, reference.col)), reference.shape)
    assert np.allclose(matrix.csr.toarray(), expected.toarray())
    assert matrix.nnz == reference.nnz  # zero real parts still count as entries


def test_out_of_range_values_are_clipped(shared):
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "temp.mtx.gz")  # up to 4.8e38
    assert np.isfinite(matrix.csr.data).all()
    assert matrix.csr.data.min() == -np.finfo(np.float32).max  # the -4.8e38 entry


def test_pattern_file(tmp_path):
    text = HEADER.format(field="pattern", symmetry="general") + "3 4 3\n1 1\n3 4\n3 4\n"
    matrix = load_matrix(_write(tmp_path / "p.mtx", text))
    assert matrix.field == "pattern" and matrix.nnz == 2  # the duplicate is one entry
    assert matrix.csr.toarray().tolist() == [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]


def test_integer_values_exact(tmp_path):
    text = HEADER.format(field="integer", symmetry="general") + "2 2 2\n1 2 -7\n2 1 123456\n"
    matrix = load_matrix(_write(tmp_path / "i.mtx", text))
    assert matrix.field == "integer"
    assert matrix.csr.toarray().tolist() == [[0, -7], [123456, 0]]


def test_duplicates_summed_and_zeros_kept(tmp_path):
    body = "3 3 4\n1 1 1.5\n1 1 2.0\n2 3 0.0\n3 2 -1\n"
    matrix = load_matrix(
        _write(tmp_path / "d.mtx", HEADER.format(field="real", symmetry="general") + body)
    )
    assert matrix.nnz == 3  # (1,1) once, the explicit zero at (2,3) kept
    assert matrix.csr[0, 0] == pytest.approx(3.5)
    assert matrix.csr.indices.tolist() == [0, 2, 1] and matrix.csr.data[1] == 0.0


def test_skew_and_hermitian_mirrors(tmp_path):
    skew = HEADER.format(field="real", symmetry="skew-symmetric") + "3 3 2\n2 1 4.0\n3 1 0\n"
    matrix = load_matrix(_write(tmp_path / "s.mtx", skew))
    assert matrix.symmetry == "skew-symmetric" and matrix.nnz == 4  # explicit 0 mirrored too
    dense = matrix.csr.toarray()
    assert dense[1, 0] == 4.0 and dense[0, 1] == -4.0
    herm = HEADER.format(field="complex", symmetry="hermitian") + "2 2 2\n1 1 3 0\n2 1 1.5 2\n"
    matrix = load_matrix(_write(tmp_path / "h.mtx", herm))
    assert matrix.field == "complex" and matrix.symmetry == "hermitian"
    assert matrix.csr.toarray().tolist() == [[3.0, 1.5], [1.5, 0.0]]  # real part of conj
    assert matrix.nnz == 3


def test_symmetric_expansion_keeps_diagonal_once(tmp_path):
    text = HEADER.format(field="real", symmetry="symmetric") + "3 3 3\n1 1 2\n2 1 5\n3 3 0\n"
    matrix = load_matrix(_write(tmp_path / "sym.mtx", text))
    assert matrix.nnz == 4
    assert matrix.csr.toarray().tolist() == [[2, 5, 0], [5, 0, 0], [0, 0, 0]]


def test_dense_array_file(tmp_path):
    text = "%%MatrixMarket matrix array real general\n2 2\n1\n0\n0\n3\n"
    matrix = load_matrix(_write(tmp_path / "a.mtx", text))
    assert matrix.nnz == 2 and matrix.csr.toarray().tolist() == [[1, 0], [0, 3]]


def test_waco_csr_round_trip(tmp_path):
    reference = sp.random(50, 30, density=0.1, format="csr", random_state=3)
    path = tmp_path / "m.csr"
    header = np.array([50, 30, reference.nnz], dtype="<i4")
    parts = [header, reference.indptr.astype("<i4"), reference.indices.astype("<i4")]
    path.write_bytes(b"".join(p.tobytes() for p in parts))
    matrix = load_matrix(path)
    assert matrix.field == "pattern" and matrix.name == "m"
    assert (matrix.csr != (reference != 0).astype(np.float32)).nnz == 0


@pytest.mark.parametrize("suffix", [".npz", ".mtx", ".mtx.gz"])
def test_save_load_round_trip(tmp_path, suffix):
    csr = sp.random(40, 60, density=0.05, format="csr", random_state=1, dtype=np.float32)
    csr.data[::3] = 0.0  # explicit zeros must survive
    original = Matrix("r", csr, source="test")
    loaded = load_matrix(save_matrix(original, tmp_path / f"r{suffix}"))
    assert loaded.shape == original.shape and loaded.nnz == csr.nnz
    assert np.array_equal(loaded.csr.indptr, original.csr.indptr)
    assert np.array_equal(loaded.csr.indices, original.csr.indices)
    assert np.array_equal(loaded.csr.data, original.csr.data)
    assert loaded.sha256 == original.sha256


def test_npz_field_from_dtype(tmp_path):
    path = tmp_path / "b.npz"
    sp.save_npz(path, sp.csr_matrix(np.array([[True, False], [False, True]])))
    assert load_matrix(path).field == "pattern"
    sp.save_npz(path, sp.coo_matrix(np.array([[2, 0], [0, 5]], dtype=np.int64)))
    loaded = load_matrix(path)
    assert loaded.field == "integer" and loaded.csr.toarray().tolist() == [[2, 0], [0, 5]]


def _tar_with(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_suitesparse_tar_reads_the_named_member(shared, tmp_path):
    source = shared / "matrices" / "suitesparse" / "bcspwr06.mtx.gz"
    text = gzip.decompress(source.read_bytes())
    decoy = HEADER.format(field="real", symmetry="general").encode() + b"1 1 1\n1 1 9\n"
    members = {"bcspwr06/bcspwr06_coord.mtx": decoy, "bcspwr06/bcspwr06.mtx": text}
    matrix = load_matrix(_tar_with(tmp_path / "bcspwr06.tar.gz", members))
    reference = load_matrix(source)
    assert matrix.name == "bcspwr06" and matrix.sha256 == reference.sha256
    assert not (tmp_path / "bcspwr06").exists()  # read from the archive, nothing extracted


def test_tgz_with_single_mtx(tmp_path):
    text = HEADER.format(field="real", symmetry="general").encode() + b"2 2 1\n2 2 4\n"
    matrix = load_matrix(_tar_with(tmp_path / "other.tgz", {"x/y.mtx": text}))
    assert matrix.nnz == 1 and matrix.csr[1, 1] == 4


def test_decompressed_size_is_bounded_by_the_declared_entries(tmp_path):
    """A .mtx.gz whose body outgrows its header's entry count stops being read (gzip bomb);
    modest trailing padding within the bound still loads."""
    head = b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n"
    fine, bomb = tmp_path / "fine.mtx.gz", tmp_path / "bomb.mtx.gz"
    fine.write_bytes(gzip.compress(head + b"\n" * 1000))
    bomb.write_bytes(gzip.compress(head + b"\n" * (4 << 20)))
    assert load_matrix(fine).nnz == 1
    with pytest.raises(InputError, match="more than 1 declared entries need"):
        load_matrix(bomb)


def test_matrix_stats_on_a_known_matrix():
    dense = np.array([[1, 0, 0, 2], [0, 0, 0, 0], [0, 3, 4, 0]], dtype=np.float32)
    stats = matrix_stats(Matrix("k", sp.csr_matrix(dense), field="real"))
    lengths = np.array([2, 0, 2])
    assert stats["rows"] == 3 and stats["cols"] == 4 and stats["nnz"] == 4
    assert stats["density"] == pytest.approx(4 / 12)
    assert stats["row_mean"] == pytest.approx(4 / 3) and stats["row_max"] == 2
    assert stats["row_cv"] == pytest.approx(lengths.std() / lengths.mean())
    assert stats["bandwidth"] == 3


def test_expand_matrix_paths(tmp_path, shared):
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    for name in ("b.mtx", "sub/a.npz", ".hidden/c.mtx", "notes.txt", "sub/z.csr"):
        (tmp_path / name).write_text("x")
    found = expand_matrix_paths([tmp_path, shared / "matrices" / "waco" / "c-46.csr"])
    names = [p.relative_to(tmp_path).as_posix() for p in found[:3]]
    assert names == ["b.mtx", "sub/a.npz", "sub/z.csr"] and found[3].name == "c-46.csr"
    with pytest.raises(InputError, match="no such file"):
        expand_matrix_paths([tmp_path / "missing.mtx"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no matrix files"):
        expand_matrix_paths([tmp_path / "empty"])


def test_cli_info_json_reports_every_shared_file(shared, suitesparse_files, waco_files):
    from click.testing import CliRunner

    from cognate.cli import main

    paths = [str(p) for p in suitesparse_files + waco_files]
    result = CliRunner().invoke(main, ["data", "info", *paths, "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.output)
    table = _readme_table(shared)
    assert [r["path"] for r in records] == paths
    for record in records:
        expected = table[Path(record["path"]).name]
        assert (record["rows"], record["cols"]) == expected["shape"]
        if "symmetric" not in expected["kind"]:
            assert record["nnz"] == expected["entries"]
        assert record["density"] == pytest.approx(record["nnz"] / (record["rows"] * record["cols"]))
        assert set(record) >= {"name", "field", "symmetry", "row_mean", "row_max", "row_cv"}
    folder = CliRunner().invoke(main, ["data", "info", str(shared / "matrices" / "waco")])
    assert folder.exit_code == 0 and "nemspmm1_16x4_0" in folder.output


# --- permutation index maps ------------------------------------------------------

# The store keys on these: a matrix without index maps must hash exactly as before maps existed.
PINNED_SHA256 = {
    "suitesparse/494_bus.mtx.gz": "8dc7c90a34f0d7812ab8f67663cd93a5106aac23b2013571937ea73a9b9b3802",
    "suitesparse/bcspwr06.mtx.gz": "073661c143550165e7977d9b592c638c8677ccdb58ee2baa472cf1aa45f02b44",
    "waco/Trec6_16x16_9.csr": "51142ed7b99d5ea71079909522e737bfa82f720277fdd362e79c8480081dc031",
}


@pytest.mark.parametrize("relative", sorted(PINNED_SHA256))
def test_shared_matrix_hashes_are_unchanged(shared, relative):
    matrix = load_matrix(shared / "matrices" / relative)
    assert not matrix.permuted and matrix.row_perm is None and matrix.col_perm is None
    assert matrix.sha256 == PINNED_SHA256[relative]


def _permuted_bus(shared) -> tuple[Matrix, np.ndarray]:
    """494_bus as the structured S and a Matrix A = S permuted by two seeded index maps."""
    s = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz").csr
    rng = np.random.default_rng(5)
    row_perm, col_perm = rng.permutation(s.shape[0]), rng.permutation(s.shape[1])
    a = canonicalize(s[np.argsort(row_perm)][:, np.argsort(col_perm)])
    return Matrix("bus_perm", a, row_perm=row_perm, col_perm=col_perm), s.toarray()


def test_index_maps_mean_a_of_perm_is_s(shared):
    matrix, s = _permuted_bus(shared)
    a = matrix.csr.toarray()
    assert np.array_equal(a[np.ix_(matrix.row_perm, matrix.col_perm)], s)
    assert np.array_equal(matrix.structured().toarray(), s)
    assert matrix.row_perm.dtype == np.int32 and matrix.permuted
    plain = Matrix("a", matrix.csr)
    assert plain.structured() is plain.csr
    assert matrix.sha256 != plain.sha256  # the maps change what kernels do
    only_rows = Matrix("a", matrix.csr, row_perm=matrix.row_perm)
    assert len({matrix.sha256, plain.sha256, only_rows.sha256}) == 3


def test_npz_carries_index_maps(shared, tmp_path):
    matrix, _ = _permuted_bus(shared)
    path = save_matrix(matrix, tmp_path / "bus_perm.npz")
    loaded = load_matrix(path)
    assert np.array_equal(loaded.row_perm, matrix.row_perm)
    assert np.array_equal(loaded.col_perm, matrix.col_perm)
    assert loaded.sha256 == matrix.sha256
    with np.load(path) as raw:  # still a scipy .npz, with the maps as extra keys
        assert {"row_perm", "col_perm", "indptr", "indices", "data"} <= set(raw.files)
    assert (sp.load_npz(path) != matrix.csr).nnz == 0
    mtx = load_matrix(save_matrix(matrix, tmp_path / "bus_perm.mtx"))  # .mtx has no maps
    assert not mtx.permuted and (mtx.csr != matrix.csr).nnz == 0


@pytest.mark.parametrize(
    ("row_perm", "message"),
    [
        (np.arange(10), "length 494"),
        (np.zeros(494, dtype=np.int64), "not a permutation"),
        (np.arange(1, 495), "outside"),
        (np.linspace(0, 1, 494), "integers"),
    ],
)
def test_bad_index_maps_are_one_line_errors(shared, tmp_path, row_perm, message):
    csr = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz").csr
    with pytest.raises(CognateError, match=message):
        Matrix("bad", csr, row_perm=row_perm)
    path = tmp_path / "bad.npz"
    np.savez_compressed(
        path,
        indices=csr.indices,
        indptr=csr.indptr,
        format=b"csr",
        shape=csr.shape,
        data=csr.data,
        row_perm=row_perm,
    )
    with pytest.raises(InputError, match=f"bad.npz.*row_perm.*{message}") as caught:
        load_matrix(path)
    assert "\n" not in str(caught.value)


# --- strict numbers ---------------------------------------------------------------------

_BANNER = "%%MatrixMarket matrix coordinate {} general\n"


def _mtx(
    tmp_path: Path, field: str, lines: list[str], name: str = "m.mtx", shape: str = "4 4"
) -> Path:
    path = tmp_path / name
    entries = sum(bool(line.strip()) for line in lines)
    path.write_text(_BANNER.format(field) + f"{shape} {entries}\n" + "".join(lines))
    return path


def test_strict_numbers_keep_every_valid_form(tmp_path):
    lines = ["1 1 -1.5e-3\n", "1 2 5.\n", "2 2 .25\n", "\n", "3 3 1E+2  \r\n", "4 4 -0\n"]
    lines += ["2 1 -inf\n", "1 3 NaN\n", "4 1\t7 \n"]
    csr = load_matrix(_mtx(tmp_path, "real", lines)).csr
    big = np.finfo(np.float32).max
    expected = {(0, 0): -1.5e-3, (0, 1): 5.0, (1, 1): 0.25, (2, 2): 100.0, (3, 3): 0.0}
    expected.update({(1, 0): -big, (0, 2): 0.0, (3, 0): 7.0})
    for (i, j), value in expected.items():
        assert csr[i, j] == np.float32(value), (i, j)
    assert csr.nnz == len(expected)


@pytest.mark.parametrize(
    ("field", "line", "problem"),
    [
        ("real", "2 2 0x10", r"line 4: '0x10' is not a real number"),
        ("real", "2 2 5abc", r"line 4: '5abc' is not a real number"),
        ("real", "2 2 1-2", r"line 4: '1-2' is not a real number"),
        ("real", "2 2 1.5.2", r"line 4: '1\.5\.2' is not a real number"),
        ("real", "2 2 1e5e5", r"line 4: '1e5e5' is not a real number"),
        ("real", "2 2 1e-5.5", r"line 4: '1e-5\.5' is not a real number"),
        ("real", "2 2 1e", r"line 4: '1e' is not a real number"),
        ("real", "2 2 .", r"line 4: '\.' is not a real number"),
        ("integer", "2 2 1.5", r"line 4: '1\.5' is not an integer number"),
        ("integer", "2 2 1e3", r"line 4: '1e3' is not an integer number"),
        ("real", "2 2 1 2", r"line 4: 4 numbers, an entry of a real file has 3"),
        ("pattern", "2 2 1", r"line 4: 3 numbers, an entry of a pattern file has 2"),
        ("complex", "2 2 1 2 3", r"line 4: 5 numbers, an entry of a complex file has 4"),
    ],
)
def test_strict_numbers_refuse_what_the_parser_would_misread(tmp_path, field, line, problem):
    first = "1 1" + {"pattern": "", "complex": " 1 0"}.get(field, " 1") + "\n"
    path = _mtx(tmp_path, field, [first, line + "\n"])
    with pytest.raises(InputError, match=problem) as caught:
        load_matrix(path)
    assert str(path) in str(caught.value)


def test_strict_numbers_name_the_line_deep_in_a_large_file(tmp_path):
    """A bad value past the first megabytes (the vectorised check reads in pieces): the
    line number is the file's."""
    rows = [f"{i % 1000 + 1} {i // 1000 + 1} {i * 0.5:.6e}\n" for i in range(150_000)]
    rows[123_456] = "457 124 3.0abc\n"  # the coordinates it had
    path = _mtx(tmp_path, "real", rows, shape="1000 150")
    with pytest.raises(InputError, match=r"Matrix Market line 123459: '3\.0abc'"):
        load_matrix(path)
    rows[123_456] = "457 124 3.0\n"
    assert load_matrix(_mtx(tmp_path, "real", rows, "good.mtx", "1000 150")).nnz == 150_000


def test_strict_numbers_agree_with_a_line_by_line_reading(tmp_path):
    """Random numbers made of digits, signs, points and exponents: a file loads exactly
    when every line is right by a plain line-by-line reading of the grammar."""
    rng = np.random.default_rng(7)
    real = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
    alphabet = list("0123456789.eE+-")
    forms = ["{:.3e}", "{:.4f}", "{:.0f}", "{:.2E}", "{:g}", "{:.0f}."]

    def value() -> str:
        if rng.random() < 0.3:  # anything made of these characters
            return "".join(rng.choice(alphabet, size=rng.integers(1, 6)))
        return str(rng.choice(forms)).format(rng.normal() * 10.0 ** rng.integers(-5, 6))

    for case in range(150):
        values = [value() for _ in range(3)]
        lines = [f"{k + 1} {k + 1} {v}\n" for k, v in enumerate(values)]
        path = _mtx(tmp_path, "real", lines, f"case{case}.mtx")
        right = all(real.fullmatch(v) and not v.startswith("+") for v in values)
        try:
            load_matrix(path)
            loaded = True
        except InputError:
            loaded = False
        assert loaded == right, values


def test_a_directory_is_named_as_one_not_as_an_unknown_format(tmp_path, capsys) -> None:
    from cognate.cli import run

    folder = tmp_path / "graphs.mtx"  # even with a matrix suffix
    folder.mkdir()
    with pytest.raises(SystemExit) as stop:
        run(["tune", str(folder)])
    err = capsys.readouterr().err
    assert stop.value.code == 1 and len(err.strip().splitlines()) == 1, err
    assert "a directory, not a matrix file" in err and "unknown matrix format" not in err
