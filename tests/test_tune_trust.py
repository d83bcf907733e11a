"""What ``cognate tune`` prints as its result is true, or says that it could not tell:

- on a loaded machine (two busy loops on the cores) no speedup whose interval overlaps the
  baseline's is printed as a win, and the result line carries the load caveat;
- ``--emit`` writes the pick printed as best, and ``--from-json`` writes it again without
  timing; every command hint, run as printed, reproduces the run's choices;
- a run in which every verified config failed exits non-zero;
- the ``ranking`` object of ``--json`` has one shape for every target.

The shipped models rank a small generated matrix (no training here).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cognate import synth
from cognate.cli import run as cli_run
from cognate.cli.tune import tune as tune_command
from cognate.search.ranking_json import FIGURES
from cognate.targets import get_target

pytestmark = pytest.mark.usefixtures("one_torch_thread")

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small power-law matrix: kernels of tens of microseconds, quick to time."""
    path = tmp_path_factory.mktemp("trust") / "g.npz"
    sp.save_npz(path, synth.generate("rmat", 2048, 2048, nnz=16000, seed=3).csr)
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli_run(args)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def hints(text: str) -> list[str]:
    """The commands the output hands the user: every `cognate ...` in backquotes."""
    return re.findall(r"`(cognate [^`]+)`", " ".join(text.split()))


def seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


def interval(cell: str) -> tuple[float, float]:
    """A runtime cell "660.2 us ±7.453 ms" as (low, high) seconds."""
    median, _, spread = cell.partition("±")
    m, s = seconds(median.strip()), seconds(spread.strip()) if spread else 0.0
    return m - s, m + s


# --- a loaded machine ---------------------------------------------------------------------


def test_under_load_no_overlapping_speedup_is_printed_as_a_win(matrix, capsys) -> None:
    """Two busy loops keep both cores busy while tune verifies: if the result line names a
    pick faster than the baseline, the two intervals it prints do not overlap; the result
    line itself says the timings are unreliable, and the hint to measure again repeats
    every option of the run."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        args = ["tune", str(matrix), "--width", "16", "--top-k", "1", "--candidates", "300"]
        args += ["--seed", "2", "--verify", "--no-record"]
        code, out, err = run_cli(args, capsys)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert code == 0, err
    text = " ".join(out.split())
    result_line = re.search(
        r"(best: .*?|rank 1 is the baseline config.*?|kept the base.*?)"
        r" library references:",
        text,
    )
    assert result_line, text
    line = result_line.group(1)
    assert "timings unreliable: load" in line and "this verdict may not hold" in line
    if line.startswith("best:"):  # named faster: the printed intervals must not overlap
        found = re.search(r"best: [^,]*(?:\([^)]*\))?, ([^,]+?), .*?x vs baseline \(([^;)]+)", line)
        assert found, line
        best, base = interval(found.group(1)), interval(found.group(2))
        assert best[1] < base[0], line
    else:
        assert "x vs baseline" not in line
    saved = json.loads(Path(re.search(r"--from-json (\S+)", text).group(1)).read_text())
    verdict = saved["verdict"]
    assert verdict["unreliable"] is True
    if verdict["faster_than_baseline"]:
        assert verdict["best_interval_s"][1] < verdict["baseline_interval_s"][0]
    again = next(h for h in hints(out) if "--wait-quiet" in h)
    assert _params(again, drop=("wait_quiet",)) == _params(
        shlex.join(["cognate", *args]), drop=("wait_quiet",)
    )
    assert _params(again)["wait_quiet"] > 0


def _params(command: str, drop: tuple[str, ...] = ()) -> dict:
    """The tune parameters a command line sets (click parses it as the CLI would)."""
    words = shlex.split(command)
    assert words[:2] == ["cognate", "tune"], command
    ctx = tune_command.make_context("tune", words[2:])
    return {k: v for k, v in ctx.params.items() if k not in drop}


# --- emit, --from-json and the hints ------------------------------------------------------


def test_emit_writes_the_pick_printed_as_best_and_from_json_writes_it_again(
    matrix, tmp_path, capsys
) -> None:
    args = ["tune", str(matrix), "--width", "16", "--top-k", "1", "--candidates", "300"]
    args += ["--verify", "--no-record", "--emit", str(tmp_path / "a")]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    text = " ".join(out.split())
    pick = re.search(r"; the pick: (.*?) ranking:", text).group(1)
    (emitted,) = sorted((tmp_path / "a").glob("*.json"))
    info = json.loads(emitted.read_text())
    assert info["description"] == pick
    assert "--from-json" not in text  # --emit given: no hint to emit again
    path = next(Path(p) for p in _home_results() if p.name.startswith("g-cpu-spmm-w16"))
    found = json.loads(path.read_text())
    assert found["best"]["description"] == pick and found["matrix_path"] == str(matrix)
    code, out, err = run_cli(
        ["tune", "--from-json", str(path), "--emit", str(tmp_path / "b")], capsys
    )
    assert code == 0, err
    for first in (tmp_path / "a").iterdir():
        assert (tmp_path / "b" / first.name).read_text() == first.read_text()


def _home_results() -> list[Path]:
    from cognate.search.saved import results_dir

    return sorted(results_dir().glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)


def test_every_hint_runs_as_printed_and_reproduces_the_choices(matrix, tmp_path, capsys) -> None:
    """A spade run with options of its own (--model, --width, --op, --top-k, --seed): the
    hint to measure carries them all and ranks the same top-k; the hint to keep the pick
    writes the printed pick; the Python hint's kernel runs the pick of a cpu run."""
    model = Path(__file__).parents[1] / "data" / "models" / "spade-sddmm.safetensors"
    args = ["tune", str(matrix), "--target", "spade", "--op", "sddmm", "--width", "32"]
    args += ["--model", str(model), "--top-k", "3", "--seed", "4", "--json"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    first = json.loads(out)
    code, out, err = run_cli(args[:-1], capsys)  # the same run, as text
    assert code == 0, err
    commands = hints(out)
    assert len(commands) == 2, out
    keep, measure = commands
    assert "--model" in measure and _params(measure, drop=("verify",)) == _params(
        shlex.join(["cognate", *args[:-1]]), drop=("verify",)
    )
    code, out, err = run_cli([*shlex.split(measure)[1:], "--json"], capsys)
    assert code == 0, err
    again = json.loads(out)
    assert [c["hash"] for c in again["candidates"] if not c["variant"]] == [
        c["hash"] for c in first["candidates"]
    ]
    emit_dir = tmp_path / "kept"
    code, out, err = run_cli([*shlex.split(keep.replace("DIR", str(emit_dir)))[1:]], capsys)
    assert code == 0, err
    (written,) = emit_dir.iterdir()
    assert first["best"]["hash"] in written.name


def test_the_python_hint_runs_the_saved_pick(matrix, capsys) -> None:
    import cognate.search

    args = ["tune", str(matrix), "--width", "16", "--top-k", "2", "--candidates", "300"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    call = re.search(r"`(cognate\.search\.kernel_from_json\('([^']+)'\))\(B, out=C\)`", out)
    assert call, out
    kernel = cognate.search.kernel_from_json(call.group(2))
    a = sp.load_npz(matrix).tocsr().astype(np.float32)
    b = np.random.default_rng(0).standard_normal((a.shape[1], 16)).astype(np.float32)
    np.testing.assert_allclose(kernel(b), a @ b, rtol=1e-4, atol=1e-4)


def test_from_json_refuses_what_it_would_ignore(matrix, tmp_path, capsys) -> None:
    code, _, err = run_cli(["tune", "--from-json", str(tmp_path / "none.json")], capsys)
    assert code == 1 and "add --emit DIR" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"matrix": "g"}')
    code, _, err = run_cli(["tune", "--from-json", str(bad), "--emit", str(tmp_path)], capsys)
    assert code == 1 and "not a tune result" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(
        ["tune", str(matrix), "--width", "8", "--from-json", str(bad), "--emit", "d"], capsys
    )
    assert code == 1 and "drop MATRIX, --width" in err


# --- every verified config failed ---------------------------------------------------------


def test_tune_exits_non_zero_when_every_verified_config_failed(matrix, monkeypatch, capsys) -> None:
    from cognate.runner import Measurement
    from cognate.targets import Verification

    def out_of_memory(result, target, progress, options, threads=None) -> None:
        configs = {c.config for c in [*result.candidates, result.baseline]}
        failed = [Measurement(c, "error", error="out of memory") for c in configs]
        result.take(Verification(failed))

    monkeypatch.setattr("cognate.search.tune.verify_result", out_of_memory)
    args = ["tune", str(matrix), "--width", "16", "--top-k", "2", "--candidates", "300"]
    code, out, err = run_cli([*args, "--verify", "--no-record"], capsys)
    assert code == 1, out
    text = " ".join(out.split())
    assert "no config ran:" in text and "error: out of memory" in text and "best:" not in text
    assert "--from-json" not in text  # no pick to keep
    code, out, err = run_cli([*args, "--verify", "--no-record", "--json"], capsys)
    assert code == 1 and json.loads(out)["all_failed"] is True


# --- the ranking object -------------------------------------------------------------------


def test_ranking_json_has_one_shape_for_every_target(matrix, capsys) -> None:
    shapes = {}
    for target in ("cpu", "spade", "spade-calibrated", "gpu"):
        args = ["tune", str(matrix), "--target", target, "--width", "32", "--top-k", "1"]
        code, out, err = run_cli([*args, "--candidates", "200", "--json"], capsys)
        assert code == 0, err
        ranking = json.loads(out)["ranking"]
        shapes[target] = set(ranking)
        validation = ranking["validation"]
        if validation is None:
            continue
        assert set(validation) == {"matrices", "k", "oracle_speedup_vs_baseline", "options"}
        for option in validation["options"].values():
            assert set(option) == {new for _, new in FIGURES} | {"portfolio_size", "chosen"}
        assert sum(o["chosen"] for o in validation["options"].values()) == 1
    assert len({frozenset(s) for s in shapes.values()}) == 1, shapes
    assert get_target("gpu")  # the zero-shot model: no validation, same keys


# --- --wait-quiet ---------------------------------------------------------------------------


def test_wait_quiet_waits_for_the_load_and_measures_again(matrix, monkeypatch, capsys) -> None:
    """A busy machine before timing: tune waits; timings taken on a busy machine anyway: it
    measures again once the machine is quiet, within the --wait-quiet seconds."""
    from types import SimpleNamespace

    from cognate.cli import tune as tune_cli
    from cognate.timing import Load

    loads = iter([True, False, True, False])  # busy, quiet | (timed busy) busy, quiet
    monkeypatch.setattr(
        "cognate.timing.machine_load",
        lambda threads=None: Load(1.0, 2.0 if next(loads) else 0.0, 2, 2),
    )
    monkeypatch.setattr(tune_cli, "QUIET_POLL_S", 0.01)
    runs = iter([True, False])  # the first verify's timings were unreliable, the second not
    calls = []

    def fake_tune(matrix, **run):
        calls.append(run)
        return SimpleNamespace(unreliable=next(runs))

    monkeypatch.setattr("cognate.api.tune", fake_tune)
    run = dict(target="cpu", op="spmm", model=None, verify=True, threads=None)
    result, _ = tune_cli._run(matrix, run, None, 30.0, True, tune_cli._console(True))
    assert len(calls) == 2 and result.unreliable is False
    err = capsys.readouterr().err
    assert "waiting up to" in err and "measuring again once it is quiet" in err
    with pytest.raises(SystemExit):
        cli_run(["tune", str(matrix), "--wait-quiet", "5"])
    assert "add --verify" in capsys.readouterr().err
