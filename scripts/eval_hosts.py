"""Leave-one-host-out evaluation of the cpu cost model (cognate/evaluate/hosts.py says what
each arm is).

    cognate data import data/records --db STORE          # the published hosts' records
    python scripts/eval_hosts.py --db STORE --seeds 5 --k 1 5 20 --json hosts.json
    python scripts/eval_hosts.py --from-json hosts.json --write-pick data/models/cpu-spmm.safetensors

Prints, per direction (source host -> target host), each arm's top-1 and best-of-5 as % of
the target host's oracle on held-out matrices (mean over seeds, 95% bootstrap CI over seeds
and test runs), and the paired ratio of the fine-tuned model's best-of-5 to the fixed-K
set's, chosen on the same K matrices. ``--write-pick MODEL`` stores in MODEL's metadata what
an unverified ``tune`` picks on a host the model never trained on: the baseline config where
the zero-shot rank 1 fell below it (cognate.evaluate.hosts.new_host_pick), else its rank 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from cognate.errors import CognateError
from cognate.paths import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, default=None, help="record store with >= 2 hosts")
    parser.add_argument("--op", default="spmm", choices=["spmm", "sddmm"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--k", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--epochs", type=int, default=40, help="most epochs of a fresh predictor")
    parser.add_argument("--max-nnz", type=int, default=None, help="leave larger matrices out")
    parser.add_argument(
        "--featurizer",
        type=Path,
        default=REPO_ROOT / "data" / "models" / "cpu-spmm.safetensors",
        help="the model whose featurizer every arm shares (frozen)",
    )
    parser.add_argument("--cache", type=Path, default=None, help="embeddings cache file")
    parser.add_argument(
        "--held-out-of",
        type=Path,
        default=None,
        metavar="MODEL",
        help="instead: score MODEL on its own held-out matrices per host, beside the greedy "
        "fixed set of the same host's training matrices",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="read the summary of an earlier run (its --json) instead of running",
    )
    parser.add_argument(
        "--write-pick",
        type=Path,
        default=None,
        metavar="MODEL",
        help="store in MODEL what an unverified tune picks on a host it never trained on: "
        "the baseline config where the zero-shot rank 1 fell below it in any direction",
    )
    args = parser.parse_args(argv)
    try:
        summary = json.loads(args.from_json.read_text()) if args.from_json else run(args)
        if args.write_pick:
            _write_pick(args.write_pick, args.op, summary)
    except (CognateError, OSError, ValueError) as err:
        print(f"eval_hosts: {err}", file=sys.stderr)
        return 1
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _write_pick(path: Path, op: str, summary: dict) -> None:
    from cognate.evaluate import hosts as lohosts
    from cognate.model.cost_model import CostModel
    from cognate.model.encoding import NEW_HOST_PICK_KEY
    from cognate.targets import get_target

    model = CostModel.load(path, get_target("cpu").space(op))
    rule = lohosts.new_host_pick(summary)
    model.metadata[NEW_HOST_PICK_KEY] = rule
    model.save(path)
    print(f"{path}: on a new host an unverified tune picks the {rule['pick']}")


def run(args: argparse.Namespace) -> dict:
    import torch

    from cognate.evaluate import hosts as lohosts
    from cognate.records import read_runs, record_frame
    from cognate.targets import get_target

    if args.db is None:
        raise CognateError("--db STORE is required (or --from-json FILE)")
    torch.set_num_threads(2)
    space = get_target("cpu").space(args.op)
    start = time.perf_counter()
    runs = read_runs(record_frame(args.db, space, args.max_nnz), space)
    by_host = lohosts.hosts_of(runs)
    if args.held_out_of is not None:
        return _held_out(args.held_out_of, space, runs)
    if len(by_host) < 2:
        raise CognateError(f"{args.db}: records of {len(by_host)} host(s); need 2 or more")
    print(f"{len(runs)} runs of {len({r.key for r in runs})} matrices on {len(by_host)} hosts:")
    for host in by_host.values():
        widths = sorted({r.width for r in host.runs})
        print(f"  {host.name}: {len(host.keys)} matrices, widths {widths}")
    model, featurizer_train = lohosts.load_featurizer(args.featurizer, space)
    embeddings = lohosts.embed_all(model, runs, args.cache)
    print(f"embedded in {time.perf_counter() - start:.0f} s (featurizer {args.featurizer.name})")
    trainer = lohosts.make_trainer(model, space, runs, embeddings, args.epochs)
    variants = {c.hash for c in space.kernel_variants()} if args.op == "spmm" else set()
    summary: dict = {"featurizer": str(args.featurizer), "seeds": args.seeds, "k": args.k}
    for source, target in itertools.permutations(by_host.values(), 2):
        result = lohosts.direction(
            source,
            target,
            trainer,
            featurizer_train,
            variants,
            args.k,
            range(args.seeds),
            own=model,
        )
        table = lohosts.summarize(result, args.k)
        _print(result, table)
        key = f"{source.name} -> {target.name}"
        summary[key] = {
            **{k: v for k, v in result.items() if k not in ("arms", "oracle")},
            **table,
        }
    print(f"done in {time.perf_counter() - start:.0f} s")
    return summary


def _held_out(path: Path, space, runs) -> dict:
    from cognate.evaluate import hosts as lohosts

    model, _ = lohosts.load_featurizer(path, space)
    table = lohosts.held_out_per_host(model, runs)
    print(
        "| host | held-out runs | model top-1 | model best of 5 | fixed top-1 | fixed 5-set | baseline |"
    )
    for name, row in table.items():
        cells = [f"{100 * row[k]:.1f}%" for k in (
            "model_top1", "model_top5", "fixed_top1", "fixed_top5", "baseline_top1"
        )]  # fmt: skip
        print(
            f"| {name} | {row['runs']} ({row['matrices']} matrices) | " + " | ".join(cells) + " |"
        )
    return {"held_out_of": str(path), **table}


def _print(result: dict, table: dict) -> None:
    print(
        f"\n{result['source']} -> {result['target']}: trained on {result['source_matrices']} "
        f"source matrices; {result['test_runs']} test runs of {result['test_matrices']} held-out "
        f"target matrices; K drawn from {result['pool_matrices']}"
    )
    print(f"  {'arm':<22} {'top-1 % of oracle':<26} best-of-5 % of oracle")
    for arm, row in table["arms"].items():
        print(f"  {arm:<22} {_pct(row['top1_of_oracle']):<26} {_pct(row['top5_of_oracle'])}")
    for name, e in table["paired"].items():
        print(f"  {name}: {e['mean']:.3f}x [{e['low']:.3f}, {e['high']:.3f}]")


def _pct(e: dict) -> str:
    return f"{100 * e['mean']:.1f}% [{100 * e['low']:.1f}, {100 * e['high']:.1f}]"


if __name__ == "__main__":
    sys.exit(main())
