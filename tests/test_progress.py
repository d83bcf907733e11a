"""What long jobs print while they run (on a pipe, not only a terminal), what fine-tuning
says about the epoch it kept, and fine-tuning reading only the matrices it uses."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from cognate.cli.finetune import kept_epoch_line
from cognate.progress import EpochReporter, Ticker, duration
from cognate.store import Store
from cognate.targets import get_target

METRICS = {"pairwise_accuracy": 0.8, "top1": 1.1, "top5": 1.2, "oracle": 1.3}


def test_durations_read_as_time() -> None:
    assert [duration(s) for s in (4.2, 45, 200, 7300)] == [
        "4.2 s",
        "45 s",
        "3 min 20 s",
        "2 h 01 min",
    ]


def test_ticker_prints_whole_lines_with_an_eta_at_most_every_interval() -> None:
    stream = io.StringIO()  # not a terminal: what a pipe or a log file gets
    ticker = Ticker("reading matrices", 4, every=3600, stream=stream)
    ticker.update(1)
    ticker.update(2)
    assert stream.getvalue() == ""  # within the interval: quiet
    ticker.every = 0
    ticker.update(3)
    ticker.update(4)
    lines = stream.getvalue().splitlines()
    assert re.fullmatch(r"reading matrices: 3/4 \(75%\), [\d.]+ s, ETA [\d.]+ s", lines[0])
    assert re.fullmatch(r"reading matrices: 4/4 \(100%\), [\d.]+ s", lines[1])


def test_epoch_reporter_says_each_epoch_with_time_and_eta() -> None:
    stream = io.StringIO()
    report = EpochReporter(epochs=3, every=0, stream=stream)
    report(0, 0, 2, METRICS)
    report(1, 1, 2, None)
    report(1, 2, 2, None)
    report(1, 2, 2, METRICS)
    report(2, 2, 2, METRICS)
    report(3, 2, 2, METRICS)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("epoch 0 (before training, ") and "val acc 0.800" in lines[0]
    assert lines[1].startswith("epoch 1/3: 1/2 matrices (50%)") and "ETA" in lines[1]
    assert len(lines) == 5  # the epoch's last step is said by the epoch's own line
    assert "top-5 1.200x" in lines[2] and "ETA" in lines[2] and "2 more epochs" in lines[2]
    assert "1 more epoch " in lines[3] and lines[4].endswith("last epoch")


def _meta(values: list[float], best: int, epochs: int = 30, **options: bool) -> dict:
    history = [{"epoch": i, "pairwise_accuracy": v} for i, v in enumerate(values)]
    opts = {"zero_shot": False, "from_scratch": False, "epochs": epochs, **options}
    return {
        "transfer": {"options": opts},
        "metrics": {"history": history, "best_epoch": best},
        "preset": {"train": {"early_stop_metric": "pairwise_accuracy"}},
    }


def test_kept_epoch_is_said_with_its_reason() -> None:
    fell = kept_epoch_line(_meta([0.851, 0.80, 0.77, 0.735], best=0))
    assert fell.startswith("kept epoch 0 (before fine-tuning, the pretrained weights)")
    assert "0.851" in fell and "fell every epoch (0.851 -> 0.735)" in fell
    assert "stopped after 3 of 30 epochs" in fell
    mixed = kept_epoch_line(_meta([0.85, 0.84, 0.849], best=0, epochs=2))
    assert "no fine-tuning epoch beat it (best 0.849)" in mixed and "stopped" not in mixed
    better = kept_epoch_line(_meta([0.7, 0.75, 0.8, 0.78], best=2))
    assert better.startswith("kept epoch 2 of 3: best validation accuracy 0.800")
    assert "up from 0.700 before fine-tuning" in better
    zero = kept_epoch_line(_meta([0.7], best=0, zero_shot=True))
    assert zero.startswith("zero-shot: no fine-tuning")


def test_kept_epoch_says_why_when_another_epoch_had_the_higher_top1() -> None:
    meta = _meta([0.7, 0.72, 0.8, 0.78], best=2)
    for entry, top1 in zip(meta["metrics"]["history"], (1.0, 1.3, 1.1, 1.2), strict=True):
        entry["top1"] = top1
    line = kept_epoch_line(meta)
    assert line.startswith("kept epoch 2 of 3: best validation accuracy 0.800")
    assert "epoch 1 had a higher top-1 (1.300x vs 1.100x)" in line
    assert "chosen on pairwise accuracy (the preset's early_stop_metric)" in line
    meta["metrics"]["history"][2]["top1"] = 1.4  # the kept epoch is also the best top-1
    assert "higher top-1" not in kept_epoch_line(meta)


def test_validation_that_cannot_discriminate_is_said() -> None:
    from types import SimpleNamespace

    from cognate.model.train import validation_caveat

    one = [SimpleNamespace(key=k, configs=["baseline"]) for k in "abc"]
    line = validation_caveat(one, {"a", "b"})
    assert line.startswith("validation cannot discriminate: each of its 2 matrices has one")
    assert "top-1 = top-5 = oracle = 1.000x" in line
    several = [*one, SimpleNamespace(key="d", configs=["baseline", "other"])]
    assert validation_caveat(several, {"a", "d"}) == ""


# --- fine-tuning reads only the matrices it uses --------------------------------------------

MATRICES = (
    "494_bus",
    "arrow",
    "bcspwr06",
    "bcspwr07",
    "dwt_878",
    "dwt_992",
    "lp_share1b",
    "olm500",
    "west0479",
    "west0497",
)


@pytest.fixture(scope="module")
def target_store(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Spade records (simulated runtimes of 3 configs) of 10 shared matrices."""
    from cognate.formats.read import load_matrix

    space = get_target("spade").space("spmm")
    runner = get_target("spade").runner()
    db = tmp_path_factory.mktemp("finetune-reads") / "r.db"
    with Store(db) as store:
        for name in MATRICES:
            matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
            configs = [space.baseline(matrix.shape), *space.sample(2, seed=1, shape=matrix.shape)]
            measured = runner.measure(matrix, "spmm", 16, configs)
            store.record(
                matrix, "spade", "spmm", 16, measured, space_version=space.version, host="sim"
            )
    return db


def test_finetune_reads_only_its_matrices_and_splits_as_over_all(target_store: Path) -> None:
    """``matrices_needed`` lists the picked, validation and test matrices; runs of those
    alone (``names`` of all) give the very split and picks that all the runs give."""
    from cognate.records import load_runs, record_frame
    from cognate.transfer.finetune import FinetuneOptions, _prepare, matrices_needed

    space = get_target("spade").space("spmm")
    frame = record_frame(target_store, space)
    names = frame.drop_duplicates("matrix_sha256").set_index("matrix_sha256")["matrix"].to_dict()
    options = FinetuneOptions(matrices=2, seed=3).resolved()
    needed = matrices_needed(names, options)
    assert needed is not None and len(needed) < len(names)
    everything = _prepare(load_runs(target_store, space), space, options)
    subset = load_runs(target_store, space, matrices=needed)
    assert {r.key for r in subset} == needed
    only = _prepare(subset, space, options, None, names)
    assert only.keys == everything.keys and only.names == everything.names
    assert {r.key for r in only.fit} == set(everything.keys["finetune"])
    assert matrices_needed(names, FinetuneOptions(matrices=2, select="active")) is None
