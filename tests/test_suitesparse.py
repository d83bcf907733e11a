"""SuiteSparse search and fetch end to end through a real HTTP mirror on 127.0.0.1.

The mirror is built from ../shared/matrices in the collection's layout: files/ssstats.csv
(the real format: a count line, a date line, then group,name,rows,cols,nnz,isReal,isBinary,
isND,posdef,psym,nsym,kind,pattern_entries) and MM/<group>/<name>.tar.gz holding
<name>/<name>.mtx.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import scipy.io
from click.testing import CliRunner

from cognate import suitesparse
from cognate.cli import main, run
from cognate.errors import CognateError
from cognate.formats.read import load_matrix

# (group, name, kind, posdef): real groups and kinds of these collection matrices.
MATRICES = [
    ("HB", "494_bus", "power network problem", 1),
    ("HB", "west0479", "chemical process simulation problem", 0),
    ("HB", "bcspwr06", "power network problem", 0),
    ("LPnetlib", "lp_share1b", "linear programming problem", 0),
]
MISSING = ("HB", "not_on_mirror")  # listed in the index, absent from the mirror
CORRUPT = ("HB", "corrupt_one")  # listed, served as garbage


def _tarball(name: str, mtx: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(f"{name}/{name}.mtx")
        info.size = len(mtx)
        archive.addfile(info, io.BytesIO(mtx))
    return buffer.getvalue()


def _index_row(group: str, name: str, kind: str, posdef: int, path: Path) -> str:
    header = gzip.open(path, "rt").readline().split()
    field, symmetry = header[3], header[4]
    a = scipy.io.mmread(path)  # symmetric files expanded: the collection's nnz counts both
    real = int(field != "complex")
    binary = int(field == "pattern")
    sym = int(symmetry != "general")
    fields = [group, name, *a.shape, a.nnz, real, binary, 0, posdef, sym, sym, kind, a.nnz]
    return ",".join(map(str, fields))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    rows = []
    for group, name, kind, posdef in MATRICES:
        source = shared / "matrices" / "suitesparse" / f"{name}.mtx.gz"
        target = root / "MM" / group / f"{name}.tar.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_tarball(name, gzip.decompress(source.read_bytes())))
        rows.append(_index_row(group, name, kind, posdef, source))
    rows.append(f"{MISSING[0]},{MISSING[1]},10,10,20,1,0,0,0,0,0,test problem,20")
    rows.append(f"{CORRUPT[0]},{CORRUPT[1]},10,10,20,1,0,0,0,0,0,test problem,20")
    (root / "MM" / CORRUPT[0] / f"{CORRUPT[1]}.tar.gz").write_bytes(os.urandom(5000))
    (root / "files").mkdir()
    text = "\n".join([str(len(rows)), "31-Oct-2023 18:12:37", *rows]) + "\n"
    (root / "files" / "ssstats.csv").write_text(text)
    return root


class _MirrorServer(ThreadingHTTPServer):
    root: Path
    # URL path -> "500" | "short" (Content-Length 100 bytes too big) | "nolength" (none sent)
    faults: dict[str, str]
    requests: list[tuple[str, str | None]]


class _Handler(BaseHTTPRequestHandler):
    """Serves the mirror with HTTP Range support (http.server's own handler has none)."""

    server: _MirrorServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.requests.append((self.path, self.headers.get("Range")))
        fault = self.server.faults.get(self.path)
        path = (self.server.root / self.path.lstrip("/")).resolve()
        if fault == "500":
            self.send_error(500, "Internal Server Error")
            return
        if not path.is_file() or self.server.root not in path.parents:
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        start, status = 0, 200
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if match:
            start, status = int(match.group(1)), 206
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        body = data[start:]
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        if fault != "nolength":
            self.send_header("Content-Length", str(len(body) + (100 if fault == "short" else 0)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(mirror: Path) -> Iterator[_MirrorServer]:
    srv = _MirrorServer(("127.0.0.1", 0), _Handler)
    srv.root, srv.faults, srv.requests = mirror.resolve(), {}, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


@pytest.fixture
def base(server: _MirrorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The mirror's URL, with a fresh cache and a clean server state for each test."""
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path / "home"))
    server.faults.clear()
    server.requests.clear()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _names(entries: list[suitesparse.IndexEntry]) -> list[str]:
    return [e.name for e in entries]


def _cli_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the console entry point expecting failure; returns its one stderr line."""
    with pytest.raises(SystemExit) as exit_info:
        run(args)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_search_through_mirror(base: str, server: _MirrorServer) -> None:
    home = os.environ.get("HOME")
    everything = suitesparse.search(base)
    assert _names(everything) == [m[1] for m in MATRICES] + [MISSING[1], CORRUPT[1]]
    assert "ssgetpy" in sys.modules and os.environ.get("HOME") == home
    bus = everything[0]
    assert (bus.id, bus.group, bus.rows, bus.cols, bus.nnz) == (1, "HB", 494, 494, 1666)
    assert (bus.dtype, bus.isspd, bus.kind) == ("real", True, "power network problem")
    assert _names(suitesparse.search(base, name="bcspwr*")) == ["bcspwr06"]
    assert _names(suitesparse.search(base, name="HB/WEST")) == ["west0479"]
    assert _names(suitesparse.search(base, name="LPnetlib/*")) == ["lp_share1b"]
    assert _names(suitesparse.search(base, kind="power")) == ["494_bus", "bcspwr06"]
    assert _names(suitesparse.search(base, dtype="binary")) == ["bcspwr06"]
    assert _names(suitesparse.search(base, nnz=(1600, 2000))) == ["494_bus", "west0479"]
    assert _names(suitesparse.search(base, rows=(100, 200))) == ["lp_share1b"]
    assert "lp_share1b" not in _names(suitesparse.search(base, square=True))
    assert _names(suitesparse.search(base, limit=2)) == ["494_bus", "west0479"]
    index_gets = [p for p, _ in server.requests if p == "/files/ssstats.csv"]
    assert index_gets == ["/files/ssstats.csv"]  # built once, then cached
    with pytest.raises(CognateError, match="--name"):
        suitesparse.search(base, name="x' OR 1=1 --")


def test_search_cli(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["data", "search", "--mirror", base, "--nnz-min", "3000", "--square", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert [e["name"] for e in json.loads(result.output)] == ["bcspwr06"]
    monkeypatch.setenv(suitesparse.URL_ENV, base)  # the environment names the mirror too
    result = CliRunner().invoke(main, ["data", "search", "--kind", "linear"])
    assert result.exit_code == 0, result.output
    assert "LPnetlib/lp_share1b" in result.output and "west0479" not in result.output


def test_fetch_end_to_end(base: str, server: _MirrorServer, mirror: Path) -> None:
    args = ["data", "fetch", "HB/west0479", "bcspwr06", "--mirror", base, "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    fetched = json.loads(result.output)
    assert [(f["name"], f["status"]) for f in fetched] == [
        ("west0479", "downloaded"),
        ("bcspwr06", "downloaded"),
    ]
    for f in fetched:
        path = Path(f["path"])
        assert path == suitesparse.cache_dir() / "HB" / f"{f['name']}.tar.gz"
        assert path.read_bytes() == (mirror / "MM" / "HB" / path.name).read_bytes()
        matrix = load_matrix(path)
        assert (matrix.shape, matrix.nnz) == ((f["rows"], f["cols"]), f["nnz"])
    result = CliRunner().invoke(main, args)  # cached: nothing downloaded again
    assert [f["status"] for f in json.loads(result.output)] == ["cached", "cached"]
    tar_gets = [p for p, _ in server.requests if p.endswith(".tar.gz")]
    assert tar_gets == ["/MM/HB/west0479.tar.gz", "/MM/HB/bcspwr06.tar.gz"]


def test_fetch_from_search_with_progress(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws its bar only on a terminal
    args = ["data", "fetch", "--from-search", "--kind", "power", "--mirror", base]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "HB/494_bus" in result.stdout and "downloaded" in result.stdout
    assert "bcspwr06.tar.gz" in result.stderr  # the progress bar's label
    assert (suitesparse.cache_dir() / "HB" / "bcspwr06.tar.gz").is_file()


def test_fetch_resumes_a_partial_download(base: str, server: _MirrorServer, mirror: Path) -> None:
    (entry,) = suitesparse.lookup(base, ["494_bus"])
    original = (mirror / "MM" / "HB" / "494_bus.tar.gz").read_bytes()
    part = entry.cache_path().with_name("494_bus.tar.gz.part")
    part.parent.mkdir(parents=True)
    half = len(original) // 2
    part.write_bytes(original[:half])
    (result,) = suitesparse.fetch([entry], base, progress=False)
    assert result.status == "downloaded" and result.path.read_bytes() == original
    assert not part.exists()
    assert server.requests[-1] == ("/MM/HB/494_bus.tar.gz", f"bytes={half}-")
    # A stale .part longer than the file: the server answers 416 and we start over.
    result.path.unlink()
    part.write_bytes(original + b"stale tail")
    (result,) = suitesparse.fetch([entry], base, progress=False)
    assert result.path.read_bytes() == original
    assert server.requests[-1] == ("/MM/HB/494_bus.tar.gz", None)


def test_size_mismatch_is_rejected(
    base: str, server: _MirrorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.faults["/MM/HB/west0479.tar.gz"] = "short"
    err = _cli_error(["data", "fetch", "west0479", "--mirror", base, "--quiet"], capsys)
    assert f"{base}/MM/HB/west0479.tar.gz" in err and "incomplete download" in err
    final = suitesparse.cache_dir() / "HB" / "west0479.tar.gz"
    assert not final.exists() and final.with_name("west0479.tar.gz.part").exists()
    server.faults.clear()  # the next run resumes: all bytes are there (416), then verified
    (entry,) = suitesparse.lookup(base, ["west0479"])
    (result,) = suitesparse.fetch([entry], base, progress=False)
    assert load_matrix(result.path).shape == (479, 479)


def test_server_errors_give_one_line(
    base: str, server: _MirrorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.faults["/MM/HB/494_bus.tar.gz"] = "500"
    err = _cli_error(["data", "fetch", "494_bus", "--mirror", base], capsys)
    assert f"{base}/MM/HB/494_bus.tar.gz: HTTP error 500" in err
    err = _cli_error(["data", "fetch", MISSING[1], "--mirror", base], capsys)
    assert f"{base}/MM/HB/{MISSING[1]}.tar.gz: HTTP error 404" in err
    err = _cli_error(["data", "fetch", "no_such_matrix", "--mirror", base], capsys)
    assert "no_such_matrix: no such matrix in the index" in err
    server.faults["/files/ssstats.csv"] = "500"
    err = _cli_error(["data", "search", "--mirror", base, "--refresh-index"], capsys)
    assert f"{base}/files/ssstats.csv: HTTP error 500" in err
    server.faults.clear()
    err = _cli_error(["data", "fetch", CORRUPT[1], "--mirror", base], capsys)
    assert (
        "unreadable" in err and not (suitesparse.cache_dir() / "HB" / "corrupt_one.tar.gz").exists()
    )
    server.faults["/files/ssstats.csv"] = "nolength"  # fine for the index (no length needed)
    server.faults["/MM/HB/494_bus.tar.gz"] = "nolength"  # not for a matrix
    err = _cli_error(["data", "fetch", "494_bus", "--mirror", base, "--refresh-index"], capsys)
    assert f"{base}/MM/HB/494_bus.tar.gz: the server sent no file size" in err
    server.faults.clear()
    err = _cli_error(["data", "fetch", "494_bus", "--mirror", base, "--max-mb", "0.001"], capsys)
    assert "exceeds the limit" in err
    assert not list(suitesparse.cache_dir().glob("HB/494_bus*"))
    # Nothing listening: a closed port on 127.0.0.1.
    closed = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = closed.server_address[1]
    closed.server_close()
    err = _cli_error(["data", "search", "--mirror", f"http://127.0.0.1:{port}"], capsys)
    assert f"http://127.0.0.1:{port}/files/ssstats.csv: cannot connect" in err
    assert "offline? --mirror DIR searches a local folder of Matrix Market files" in err


def test_local_folder_mirror_and_bad_index(
    base: str, mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder_base = suitesparse.resolve_base(str(mirror))
    assert folder_base.startswith("file://")
    (entry,) = suitesparse.lookup(folder_base, ["lp_share1b"])
    (result,) = suitesparse.fetch([entry], folder_base, progress=False)
    assert load_matrix(result.path).shape == (117, 253)
    bad = tmp_path / "bad-mirror"
    (bad / "files").mkdir(parents=True)
    (bad / "files" / "ssstats.csv").write_text(
        "3\n31-Oct-2023 18:12:37\nHB,a,1,1,1,1,0,0,0,0,0,k\n"
    )
    err = _cli_error(["data", "search", "--mirror", str(bad)], capsys)
    assert "declares 3 matrices but lists 1" in err
    (bad / "files" / "ssstats.csv").write_text(
        "1\n31-Oct-2023 18:12:37\nHB,a,x,1,1,1,0,0,0,0,0,k\n"
    )
    err = _cli_error(["data", "search", "--mirror", str(bad)], capsys)
    assert "line 3 is not a SuiteSparse index row" in err
    # A name that is unsafe as a path component is left out of the index.
    (bad / "files" / "ssstats.csv").write_text(
        "1\n31-Oct-2023 18:12:37\nHB,../x,1,1,1,1,0,0,0,0,0,k\n"
    )
    assert suitesparse.search(suitesparse.resolve_base(str(bad)), refresh=True) == []
    err = _cli_error(["data", "search", "--mirror", str(tmp_path / "nope")], capsys)
    assert "neither an http(s) URL nor a directory" in err


def test_folder_of_matrix_market_files_is_searched_from_headers(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """--mirror DIR on plain .mtx / .mtx.gz files (no ssstats.csv): indexed from the headers
    alone (a file whose entries are garbage is listed all the same), group = subfolder,
    fetch names the file itself; a bad header is left out with a warning."""
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path / "home"))
    folder = tmp_path / "mine"
    (folder / "graphs").mkdir(parents=True)
    source = shared / "matrices" / "suitesparse"
    (folder / "west0479.mtx").write_bytes(
        gzip.decompress((source / "west0479.mtx.gz").read_bytes())
    )
    shutil.copy(source / "bcspwr06.mtx.gz", folder / "graphs" / "bcspwr06.mtx.gz")
    (folder / "headeronly.mtx").write_text(
        "%%MatrixMarket matrix coordinate pattern general\n% a comment\n70000 50 12345\nzz\n"
    )
    (folder / "broken.mtx").write_text("not a matrix\n")
    (folder / "notes.txt").write_text("ignored")
    base = suitesparse.resolve_base(str(folder))
    everything = {e.full_name: e for e in suitesparse.search(base)}
    assert set(everything) == {"local/west0479", "graphs/bcspwr06", "local/headeronly"}
    assert "broken.mtx" in capsys.readouterr().err  # warned, left out
    west = load_matrix(folder / "west0479.mtx")
    entry = everything["local/west0479"]
    assert (entry.rows, entry.cols, entry.nnz, entry.dtype) == (*west.shape, west.nnz, "real")
    fake = everything["local/headeronly"]
    assert (fake.rows, fake.cols, fake.nnz, fake.dtype) == (70000, 50, 12345, "binary")
    assert [e.name for e in suitesparse.search(base, nnz=(10000, None))] == ["headeronly"]
    assert [e.name for e in suitesparse.search(base, name="graphs/bcs*")] == ["bcspwr06"]
    result = CliRunner().invoke(
        main, ["data", "fetch", "bcspwr06", "--mirror", str(folder), "--json"]
    )
    assert result.exit_code == 0, result.output
    (got,) = json.loads(result.stdout)
    assert got["status"] == "local" and got["path"] == str(folder / "graphs" / "bcspwr06.mtx.gz")
    assert not suitesparse.cache_dir().joinpath("graphs").exists()  # nothing copied
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    err = _cli_error(["data", "search", "--mirror", str(empty)], capsys)
    assert "no Matrix Market files" in err


@pytest.mark.parametrize("target_exists", [True, False])
@pytest.mark.parametrize("where", ["part", "lock"])
def test_fetch_never_writes_through_a_planted_part_link(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], target_exists: bool, where: str
) -> None:
    """A symbolic link planted at the .part or the download's lock file (a shared cache) is
    refused in one line; the file it points to, outside the cache, is neither truncated
    nor created."""
    (entry,) = suitesparse.lookup(base, ["494_bus"])
    outside = tmp_path / "outside.txt"
    if target_exists:
        outside.write_text("precious\n")
    part = entry.cache_path().with_name("494_bus.tar.gz.part")
    if where == "lock":
        part = suitesparse.cache_dir() / ".locks" / "HB.494_bus.lock"
    part.parent.mkdir(parents=True)
    part.symlink_to(outside)
    err = _cli_error(["data", "fetch", "494_bus", "--mirror", base, "--quiet"], capsys)
    assert str(part) in err and "symbolic link" in err
    if target_exists:
        assert outside.read_text() == "precious\n"
    else:
        assert not outside.exists()
    assert not entry.cache_path().exists()
