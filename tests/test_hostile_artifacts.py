"""Hostile artifacts other than matrices: model files and YAML presets that lie.

Every crafted file goes through the real CLI in a subprocess (inside a small wrapper that
reports the child's peak RSS) and must give exit 1, exactly one stderr line naming the file,
no ``internal error`` and, where the file claims something huge, a bounded peak RSS. The
model files are a shipped model (data/models/) with one thing changed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The CLI's start-up with torch imported is ~400 MB of RSS here; the crafted sizes below are
# 15 MB to 14 GB of weights, so any allocation of them crosses this bound.
MAX_RSS_MB = 1000

_WRAPPER = (
    "import resource, subprocess, sys; "
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr); "
    "sys.exit(p.returncode)"
)


def _cognate(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, list[str], float]:
    """(exit code, stdout, stderr lines, peak RSS of the cognate process in MB)."""
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "cognate", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    *lines, rss = proc.stderr.splitlines()
    return proc.returncode, proc.stdout, lines, float(rss)


def _assert_one_line(code: int, lines: list[str], path: Path, needle: str) -> None:
    assert code == 1, (code, lines)
    assert len(lines) == 1, lines
    assert lines[0].startswith("cognate: error: ") and "internal error" not in lines[0], lines
    assert str(path) in lines[0] and needle in lines[0], lines[0]


# --- model files ---------------------------------------------------------------------------


def _shipped(name: str) -> Path:
    from cognate.paths import data_dir

    return data_dir() / "models" / f"{name}.safetensors"


def _craft(
    source: Path,
    out: Path,
    meta_edit: Callable[[dict], object] | None = None,
    tensor_edit: Callable[[dict], object] | None = None,
    raw: Callable[[str], str] | None = None,
) -> Path:
    """A copy of ``source`` with its metadata, its tensors or its raw metadata JSON edited."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source), framework="pt") as f:
        text = f.metadata()["cognate"]
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    meta = json.loads(text)
    if meta_edit:
        meta_edit(meta)
    if tensor_edit:
        tensor_edit(tensors)
    text = json.dumps(meta) if meta_edit else text
    save_file(tensors, str(out), metadata={"cognate": raw(text) if raw else text})
    return out


def _shipped_autoencoder(latent: int, hidden: int) -> Callable[[dict], None]:
    """A transfer block claiming a shipped autoencoder of that size (the encoder width made
    to agree, so only the size check can refuse it)."""

    def edit(meta: dict) -> None:
        meta["transfer"] = {
            "options": {"mapper": "cognate", "latent": "ae", "seed": 0},
            "autoencoder": {
                "settings": {"latent": latent, "hidden": hidden},
                "columns": [[1.0, 2.0], [1.0, 2.0, 4.0]],
            },
        }
        meta["encoder"] = {"kind": "loopnest+ae", "dim": 39 + latent}

    return edit


def _nested(depth: int) -> Callable[[str], str]:
    return lambda text: text[:-1] + ', "notes": ' + "[" * depth + "]" * depth + "}"


def _set(section: str, key: str, value: object) -> Callable[[dict], None]:
    return lambda meta: meta[section].__setitem__(key, value)


def _all_nan(tensors: dict) -> None:
    import torch

    for name, tensor in tensors.items():
        tensors[name] = torch.full_like(tensor, float("nan"))


def _one_nan(tensors: dict) -> None:
    tensors["predictor.0.weight"][3, 5] = float("nan")


def _zero_std(tensors: dict) -> None:
    tensors["config_std"].zero_()  # finite weights whose scores are not: x / 0


# name -> (meta edit, tensor edit, raw edit, what the line must say, extra tune flags)
MODEL_CASES: dict[str, tuple] = {
    "kind_without_plus": (_set("encoder", "kind", "loopnestraw"), None, None, "encoder.kind", []),
    "nested_100k": (None, None, _nested(100_000), "nested deeper than", []),
    "negative_channels": (
        lambda m: m["preset"]["featurizer"]["channels"].__setitem__(2, -4),
        None,
        None,
        "preset.featurizer.channels.2",
        [],
    ),
    "portfolio_string": (lambda m: m.update(portfolio="top5"), None, None, "portfolio", []),
    "portfolio_list": (lambda m: m.update(portfolio=[1, 2]), None, None, "portfolio", []),
    "portfolio_ints": (_set("portfolio", "configs", [1, 2, 3]), None, None, "portfolio", []),
    "portfolio_bad_knobs": (
        _set("portfolio", "configs", [{"rp": -1}]),
        None,
        None,
        "portfolio",
        [],
    ),
    "transfer_empty": (lambda m: m.update(transfer={}), None, None, "transfer.options", []),
    "ae_width_25000": (_shipped_autoencoder(64, 25_000), None, None, "metadata describes", []),
    "ae_latent_25000": (_shipped_autoencoder(25_000, 25_000), None, None, "latent", []),
    "ae_width_1e9": (_shipped_autoencoder(64, 10**9), None, None, "hidden", []),
    "ae_2gb_within_schema": (_shipped_autoencoder(4096, 60_000), None, None, "describes", []),
    "predictor_14gb": (
        lambda m: m["preset"]["predictor"].update(hidden=[60_000, 60_000]),
        None,
        None,
        "metadata describes",
        [],
    ),
    "all_nan_weights": (None, _all_nan, None, "NaN", []),
    "one_nan_weight": (None, _one_nan, None, "predictor.0.weight hold NaN", []),
    "nan_scores_json": (None, _zero_std, None, "non-finite scores", ["--json"]),
    "extra_tensor": (
        None,
        lambda t: t.update(extra=t["config_std"].clone()),
        None,
        "unexpected extra",
        [],
    ),
}


@pytest.fixture(scope="module")
def bus(shared: Path) -> Path:
    return shared / "matrices" / "suitesparse" / "494_bus.mtx.gz"


@pytest.mark.parametrize("case", sorted(MODEL_CASES))
def test_crafted_model_file_is_one_line_and_small(case: str, bus: Path, tmp_path: Path) -> None:
    meta_edit, tensor_edit, raw, needle, flags = MODEL_CASES[case]
    model = _craft(
        _shipped("spade-spmm"), tmp_path / f"{case}.safetensors", meta_edit, tensor_edit, raw
    )
    args = ["tune", str(bus), "--target", "spade", "--op", "spmm", "--model", str(model)]
    code, out, lines, rss_mb = _cognate(*args, *flags)
    _assert_one_line(code, lines, model, needle)
    assert "NaN" not in out and out.strip() == "", out  # --json prints nothing, not a bare NaN
    assert rss_mb < MAX_RSS_MB, f"peak RSS {rss_mb:.0f} MB"


def test_the_shipped_model_still_loads_and_ranks(bus: Path) -> None:
    """The checks refuse the crafted files, not the real one: its ranking is finite JSON."""
    args = ["tune", str(bus), "--target", "spade", "--op", "spmm", "--json"]
    code, out, lines, _ = _cognate(*args, "--model", str(_shipped("spade-spmm")))
    assert code == 0, lines
    result = json.loads(out)  # strict JSON: json.loads would take NaN, so look for it too
    assert "NaN" not in out and result


def test_other_commands_share_the_checks(bus: Path, tmp_path: Path) -> None:
    """collect --from-model, finetune --model and portfolio read model files the same way."""
    nan = _craft(_shipped("spade-spmm"), tmp_path / "nan.safetensors", tensor_edit=_all_nan)
    db = tmp_path / "r.db"
    code, _, lines, _ = _cognate(
        "collect", "--target", "spade", "--op", "spmm", "--db", str(db), "--configs", "3",
        "--from-model", str(nan), str(bus),
    )  # fmt: skip
    _assert_one_line(code, lines, nan, "NaN")
    negative = _craft(
        _shipped("cpu-spmm"),
        tmp_path / "negative.safetensors",
        lambda m: m["preset"]["predictor"].update(hidden=[-256]),
    )
    code, _, lines, _ = _cognate(
        "finetune", "--model", str(negative), "--db", str(db), "--target", "spade",
        "--op", "spmm", "-o", str(tmp_path / "out.safetensors"),
    )  # fmt: skip
    _assert_one_line(code, lines, negative, "preset.predictor.hidden.0")
    assert not (tmp_path / "out.safetensors").exists()
    string = _craft(
        _shipped("spade-spmm"), tmp_path / "string.safetensors", lambda m: m.update(portfolio="x")
    )
    code, _, lines, _ = _cognate("portfolio", str(string), "--db", str(db))
    _assert_one_line(code, lines, string, "portfolio")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"format": "cognate-random-model", "seed": 1, "x": ' + "[" * 50_000, "nested deeper"),
        (
            '{"format": "cognate-random-model", "target": "spade", "op": "spmm", "seed": 1, '
            '"portfolio": "top5"}',
            "portfolio",
        ),
    ],
    ids=["deep", "portfolio_string"],
)
def test_crafted_random_model_is_one_line(
    text: str, needle: str, bus: Path, tmp_path: Path
) -> None:
    model = tmp_path / "random.json"
    model.write_text(text + "]" * text.count("["))
    args = ["tune", str(bus), "--target", "spade", "--op", "spmm", "--model", str(model)]
    code, _, lines, _ = _cognate(*args)
    _assert_one_line(code, lines, model, needle)


def test_metadata_depth_is_measured_outside_strings() -> None:
    from cognate.model.checkpoint import json_depth

    assert json_depth('{"a": "[[[[{{{{", "b": [[1], {"c": "]]]"}]}') == 3
    assert json_depth('"\\\\"') == 0 and json_depth("[" * 40 + "]" * 40) == 40


# --- YAML presets --------------------------------------------------------------------------


def _alias_bomb() -> str:
    """About 1 KB that expands to 9^9 (387 million) strings through aliases."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


YAML_CASES: dict[str, tuple[bytes, str]] = {
    "alias_bomb": (_alias_bomb().encode(), "aliases (*a) are not allowed"),
    "binary": (bytes(range(256)) * 8, "binary data"),
    "not_utf8": (b"name: caf\xe9\n", "not UTF-8"),
    "nested_50k": (b"[" * 50_000 + b"]" * 50_000, "nested deeper than"),
    "nested_blocks": ("".join("  " * i + f"k{i}:\n" for i in range(200)).encode(), "nested"),
    "oversized": (b"# " + b"x" * (2 << 20) + b"\n", "larger than"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_crafted_preset_is_one_line_and_small(case: str, tmp_path: Path) -> None:
    data, needle = YAML_CASES[case]
    preset = tmp_path / f"{case}.yaml"
    preset.write_bytes(data)
    code, _, lines, rss_mb = _cognate("evaluate", "--preset", str(preset))
    _assert_one_line(code, lines, preset, needle)
    assert rss_mb < MAX_RSS_MB, f"peak RSS {rss_mb:.0f} MB"


def test_yaml_bounds_apply_to_every_loader(tmp_path: Path) -> None:
    """Spaces, model presets and machine files go through the same loader."""
    from cognate.errors import CognateError
    from cognate.util import load_yaml, parse_yaml

    assert parse_yaml(b"a: [1, {b: 2}]\n", "x.yaml") == {"a": [1, {"b": 2}]}
    for data, _ in YAML_CASES.values():
        with pytest.raises(CognateError, match="x.yaml: "):
            parse_yaml(data, "x.yaml")
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    with pytest.raises(CognateError, match="aliases"):
        load_yaml(path, "model presets")


# --- collect: --jobs and --ray -------------------------------------------------------------


def test_collect_jobs_is_bounded(bus: Path, tmp_path: Path) -> None:
    from cognate.collect import max_jobs

    db = tmp_path / "r.db"
    args = ["collect", "--target", "spade", "--op", "spmm", "--db", str(db), str(bus)]
    code, _, lines, _ = _cognate(*args, "--jobs", "100000000")
    assert code == 1 and len(lines) == 1 and f"more than {max_jobs()}" in lines[0], lines
    assert not db.exists()


@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback TCP server that accepts and answers ``reply`` (a list: set it) or nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    reply: list[bytes] = []
    stop = threading.Event()
    held = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)
            if reply:
                conn.sendall(reply[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], reply
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize(
    "answer", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http1"]
)
def test_collect_ray_address_without_a_cluster_fails_fast(
    silent_server: tuple[int, list[bytes]], answer: bytes | None, bus: Path, tmp_path: Path
) -> None:
    """Something listens but is no Ray cluster: Ray itself retries for minutes (printing a
    warning every few seconds); cognate answers in one line within its probe's timeout."""
    from cognate.collect.ray_cluster import RAY_PROBE_TIMEOUT_S

    port, reply = silent_server
    if answer:
        reply.append(answer)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "cognate", "--version"], capture_output=True, check=True)
    startup_s = time.monotonic() - start
    args = ["collect", "--target", "spade", "--op", "spmm", "--db", str(tmp_path / "r.db")]
    start = time.monotonic()
    code, _, lines, _ = _cognate(*args, "--ray", f"127.0.0.1:{port}", str(bus))
    elapsed = time.monotonic() - start
    assert code == 1 and len(lines) == 1, lines
    assert f"127.0.0.1:{port}" in lines[0] and "internal error" not in lines[0]
    assert ("nothing answers" if answer is None else "not a Ray cluster") in lines[0], lines[0]
    assert elapsed < startup_s + RAY_PROBE_TIMEOUT_S + 5, f"{elapsed:.1f} s"


def test_ray_probe_accepts_a_grpc_server(silent_server: tuple[int, list[bytes]]) -> None:
    """An HTTP/2 server's SETTINGS frame (what Ray's GCS sends first) passes the probe."""
    from cognate.collect.ray_cluster import check_reachable

    port, reply = silent_server
    reply.append(bytes([0, 0, 6, 4, 0, 0, 0, 0, 0]) + bytes(6))
    check_reachable(f"127.0.0.1:{port}")
