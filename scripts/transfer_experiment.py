"""Transfer experiment: fine-tune on K target matrices vs zero-shot vs from
scratch, and the cognate mapper vs the random (falsification) and no-mapper ablations.

    python scripts/transfer_experiment.py --db records.db --op spmm --seeds 0 1 2

Source domain: the store's cpu records of the op when there are any. Without them (say so
in any report) the source is the target's own records of *synthetic* matrices and the
target is its *real* matrices: a transfer across matrix populations only, which still
tests whether the pretrained loop-nest weights carry over through the mapper.

The target's matrices are split by matrix (configs/transfer.yaml split_seed) into train /
validation / test; each seed picks K training matrices, fine-tunes with early stopping on
validation, and the table reports the test split: geomean speedup over the baseline config
of the model's top-1 and best-of-top-5, mean and min..max over seeds. "random pick" is the
expected speedup of a uniformly random config, the floor; "oracle" the best config.
Reads the db only (snapshot a db that is being written with sqlite3 .backup first).
The full protocol (settings chosen on validation, TL vs NT over K, bootstrap CIs, plots,
report.md) is `cognate evaluate`; this script is the quick single-K table. It stays because
it does one thing `cognate evaluate` does not: ``--source synthetic`` (pretrain on the
target's own synthetic matrices, test on its real ones: a transfer across matrix
populations; docs/transfer.md's experiment results were run that way), where evaluate's only
fallback source is the target's other op.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from cognate.evaluate.harness import random_pick
from cognate.model.preset import preset_from_dict
from cognate.model.train import train
from cognate.records import MatrixRuns, load_runs
from cognate.stats import geomean
from cognate.targets import get_target
from cognate.transfer.autoencoder import transfer_settings
from cognate.transfer.finetune import FinetuneOptions, finetune, transfer_encoder

VARIANTS = {
    "fine-tune (cognate mapper)": {},
    "fine-tune (random mapper)": {"mapper": "random"},
    "fine-tune (no mapper)": {"mapper": "none"},
    "fine-tune (raw knobs, no AE)": {"latent": "raw"},
    "zero-shot": {"zero_shot": True},
    "from scratch (NT)": {"from_scratch": True},
}


def _is_synthetic(run: MatrixRuns) -> bool:
    return run.matrix.name.startswith("syn")


def source_runs(db: Path, target: str, op: str) -> tuple[str, list[MatrixRuns] | None]:
    """cpu records of ``op`` if the store has them, else None (the caller falls back)."""
    try:
        return "cpu", load_runs(db, get_target("cpu").space(op))
    except Exception as err:  # noqa: BLE001 - no cpu records is an expected state
        print(f"# no usable cpu {op} records in {db} ({err}); falling back", flush=True)
        return "", None


def random_floor(runs: list[MatrixRuns]) -> float:
    """Geomean over matrices of the expected speedup (log-mean) of a uniformly random config."""
    return geomean(list(random_pick(runs).values()))  # shared with `cognate evaluate`


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--target", default="spade")
    parser.add_argument("--op", default="spmm")
    parser.add_argument("--matrices", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pretrain-epochs", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=None, help="fine-tune epochs")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--source",
        choices=["auto", "cpu", "synthetic"],
        default="auto",
        help="auto: cpu records when the store has any, else the synthetic fallback",
    )
    args = parser.parse_args()
    # Measured here: on 2 cores shared by many processes, torch's default 2 threads make a
    # sparse-conv embedding ~5x slower than 1 thread (oversubscription).
    torch.set_num_threads(args.threads)
    started = time.time()

    space = get_target(args.target).space(args.op)
    target_runs = load_runs(args.db, space)
    source_name, src_runs = "", None
    if args.source in ("auto", "cpu"):
        source_name, src_runs = source_runs(args.db, args.target, args.op)
        if src_runs is None and args.source == "cpu":
            print("# --source cpu: no cpu records", file=sys.stderr)
            return 1
    if src_runs is None:
        source_name = f"{args.target} {args.op}, synthetic matrices"
        src_runs = [r for r in target_runs if _is_synthetic(r)]
        target_runs = [r for r in target_runs if not _is_synthetic(r)]
        src_space = space
    else:
        src_space = get_target("cpu").space(args.op)
    print(
        f"# source: {source_name} ({len(src_runs)} matrices); target: {args.target} {args.op} "
        f"({len(target_runs)} matrices)",
        flush=True,
    )

    preset = preset_from_dict("experiment", transfer_settings()["experiment"]["preset"])
    preset = preset.with_train(epochs=args.pretrain_epochs)
    pre = train(
        src_runs, src_space, preset, seed=0, encoder=transfer_encoder(src_space, "cognate", "ae")
    )
    best = pre.metadata["metrics"]["best"]
    print(
        f"# pretrained {time.time() - started:.0f}s: source val acc {best['pairwise_accuracy']:.3f} "
        f"top1 {best['top1']:.3f}x top5 {best['top5']:.3f}x oracle {best['oracle']:.3f}x",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="cognate-transfer-"))
    model_path = pre.save(workdir / "pretrained.safetensors")
    print(f"# pretrained model: {model_path}", flush=True)

    results: dict[str, list[dict[str, float]]] = {name: [] for name in args.variants}
    test_names: list[str] = []
    for seed in args.seeds:
        for name in args.variants:
            opts = FinetuneOptions(
                matrices=args.matrices, seed=seed, epochs=args.epochs, **VARIANTS[name]
            )
            out = finetune(model_path, target_runs, space, opts)
            test = out.metadata["metrics"]["test"]
            results[name].append(test)
            test_names = [m["name"] for m in out.metadata["split"]["test"]]
            picked = ",".join(m["name"] for m in out.metadata["split"]["finetune"])
            print(
                f"# seed {seed} {name}: test top1 {test['top1']:.3f}x top5 {test['top5']:.3f}x "
                f"acc {test['pairwise_accuracy']:.3f} (epoch {out.metadata['metrics']['best_epoch']}, "
                f"on {picked}) {time.time() - started:.0f}s",
                flush=True,
            )
    test_runs = [r for r in target_runs if r.matrix.name in set(test_names)]
    _print_table(args, results, test_runs, source_name)
    print(f"# total {time.time() - started:.0f}s")
    return 0


def _print_table(args: argparse.Namespace, results: dict, test_runs: list, source: str) -> None:
    oracle = float(np.mean([r["oracle"] for r in next(iter(results.values()))]))
    print()
    print(
        f"{args.target} {args.op}, K={args.matrices} fine-tune matrices, seeds {args.seeds}, "
        f"test split of {len(test_runs)} matrices; source: {source}"
    )
    print(f"{'variant':30s} {'top-1':>22s} {'top-5':>22s} {'pairwise acc':>13s}")
    for name, entries in results.items():
        cells = []
        for key in ("top1", "top5"):
            vals = [e[key] for e in entries]
            cells.append(f"{np.mean(vals):.3f}x ({min(vals):.3f}..{max(vals):.3f})")
        acc = np.mean([e["pairwise_accuracy"] for e in entries])
        print(f"{name:30s} {cells[0]:>22s} {cells[1]:>22s} {acc:13.3f}")
    print(f"{'random pick (expected)':30s} {random_floor(test_runs):21.3f}x")
    print(f"{'oracle':30s} {oracle:21.3f}x")


if __name__ == "__main__":
    sys.exit(main())
