#!/usr/bin/env bash
# Regenerate the shipped cost models in data/models/ from a record store, with the repo's own
# commands, and write a provenance file beside each model.
#
#   scripts/train_shipped_models.sh [--db PATH] [--out DIR] [--preset NAME] [--epochs N]
#                                   [--spade finetune|pretrain] [--spade-matrices N]
#                                   [--only TARGET-OP]... [--threads N] [--hold-out F]
#                                   [--no-portfolio] [--max-nnz N] [--featurizer-from MODEL]
#
# Per op (spmm, sddmm):
#   cpu-<op>   = cognate pretrain on the store's cpu records
#   spade-<op> = cognate finetune of cpu-<op> on the spade records (the COGNATE recipe), or,
#                with --spade pretrain / when there is no cpu model, cognate pretrain on the
#                spade records directly; spade-calibrated-<op> the same on that target's.
#   gpu-<op>   = while the store holds no gpu record: cpu-<op> carried over zero-shot
#                (cognate finetune --zero-shot --without-records), labelled as such.
# A (target, op) without records in the store is skipped with a message, not an error.
# The store is snapshotted first (sqlite3 .backup), so a collection may keep writing to it.
# Each model gets <model>.provenance.json: command, data size, the names of its training,
# validation and held-out matrices, validation metrics, held-out metrics, git revision.
# --hold-out F (pretrain only): F of the matrices are never trained on or used for epoch
# selection; the model is scored on them once (README numbers come from these).
# --max-nnz N (pretrain only): matrices above N nonzeros are left out of the model's data
# (training the featurizer on a 4.7M-nnz matrix takes 11 GB and a minute per step).
# --featurizer-from MODEL (cpu pretrain only): take MODEL's featurizer, frozen, and train the
# predictor only (minutes instead of ~40: new records or hosts, a new encoding).
# Each model then gets its portfolio (cognate portfolio: the greedy fixed set of its training
# matrices ranked first, size and anchor chosen on its validation matrices) unless --no-portfolio.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
DB="${COGNATE_DB:-${COGNATE_HOME:-$HOME/.cache/cognate}/records.sqlite}"
OUT="$REPO/data/models"
PRESET=waco
EPOCHS=""
SPADE_MODE=finetune
SPADE_MATRICES=""
ONLY=""
THREADS=""
HOLD_OUT=""
MAX_NNZ=""
NO_PORTFOLIO=""
FEATURIZER_FROM=""

while [ $# -gt 0 ]; do
  case "$1" in
    --db) DB="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --preset) PRESET="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --spade) SPADE_MODE="$2"; shift 2 ;;
    --spade-matrices) SPADE_MATRICES="$2"; shift 2 ;;
    --only) ONLY="$ONLY $2"; shift 2 ;;  # e.g. --only cpu-spmm: train just that model
    --threads) THREADS="$2"; shift 2 ;;  # torch threads for pretrain (1 is fastest on a busy box)
    --hold-out) HOLD_OUT="$2"; shift 2 ;;
    --max-nnz) MAX_NNZ="$2"; shift 2 ;;
    --no-portfolio) NO_PORTFOLIO=1; shift ;;
    --featurizer-from) FEATURIZER_FROM="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "train_shipped_models.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$SPADE_MODE" in finetune|pretrain) ;; *)
  echo "train_shipped_models.sh: --spade must be finetune or pretrain" >&2; exit 2 ;;
esac
[ -f "$DB" ] || { echo "train_shipped_models.sh: $DB: no such record store" >&2; exit 1; }

mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SNAP="$WORK/records.db"
# A consistent copy even while a collector writes (WAL): sqlite's online backup.
"$PY" -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close(); s.close()" "$DB" "$SNAP"

cognate() { "$PY" -m cognate "$@"; }

ok_records() {  # target op -> number of ok records
  "$PY" - "$SNAP" "$1" "$2" <<'EOF'
import sys
from cognate.store import Store
with Store(sys.argv[1]) as store:
    frame = store.frame(target=sys.argv[2], op=sys.argv[3], status="ok")
print(len(frame))
EOF
}

provenance() {  # model command... -> writes <model minus .safetensors>.provenance.json
  local model="$1"; shift
  "$PY" - "$model" "$DB" "$SNAP" "$REPO" "$@" <<'EOF'
import datetime, json, subprocess, sys
from pathlib import Path
from cognate.model.checkpoint import read_metadata
from cognate.store import Store

model, db, snap, repo, *command = sys.argv[1:]
command = [db if arg == snap else arg for arg in command]  # name the store, not the snapshot
meta = read_metadata(model)
with Store(snap) as store:
    frame = store.frame(target=meta["target"], op=meta["op"], status="ok")
from cognate.targets import get_target
space = get_target(meta["target"]).space(meta["op"])
assert space.version == meta["space"]["version"], "the space changed since training"
frame = frame[frame["space_version"].map(space.accepts_version)]  # as training reads them
if meta.get("max_nnz"):  # pretrain --max-nnz: the larger matrices are not the model's data
    frame = frame[frame["nnz"] <= meta["max_nnz"]]

def git(*args):
    try:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None

split = meta.get("split", {})
doc = {
    "model": Path(model).name,
    "command": " ".join(["cognate", *command]),
    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "git_revision": git("rev-parse", "HEAD"),
    "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    "records_db": db,
    "data": {
        "ok_records": int(len(frame)),
        "matrices": int(frame["matrix_sha256"].nunique()) if len(frame) else 0,
        "widths": sorted(int(w) for w in frame["width"].unique()) if len(frame) else [],
        "split_sizes": {k: len(v) for k, v in split.items() if isinstance(v, list)},
    },
    "matrices": {k: sorted(m["name"] for m in v) for k, v in split.items() if isinstance(v, list)},
    "target": meta["target"],
    "op": meta["op"],
    "space": meta["space"],
    "preset": meta["preset"]["name"],
    "max_nnz": meta.get("max_nnz"),
    "encoder": meta["encoder"],
    "validation": meta.get("metrics", {}).get("best"),
    "test": meta.get("metrics", {}).get("test"),
    "transfer": {k: v for k, v in meta.get("transfer", {}).items() if k != "copied"} or None,
    "portfolio": {k: v for k, v in (meta.get("portfolio") or {}).items() if k != "configs"}
    or None,
}
out = Path(model).with_suffix(".provenance.json")
out.write_text(json.dumps(doc, indent=2) + "\n")
print(f"provenance: {out}")
EOF
}

with_portfolio() {  # model -> its portfolio chosen on its validation matrices
  [ -n "$NO_PORTFOLIO" ] && return 0
  echo "== cognate portfolio $1 --db $DB"
  cognate portfolio "$1" --db "$SNAP"
}

epochs_args=()
[ -n "$EPOCHS" ] && epochs_args=(--epochs "$EPOCHS")
pretrain_args=()
[ -n "$THREADS" ] && pretrain_args=(--threads "$THREADS")
[ -n "$HOLD_OUT" ] && pretrain_args+=(--hold-out "$HOLD_OUT")
[ -n "$MAX_NNZ" ] && pretrain_args+=(--max-nnz "$MAX_NNZ")
cpu_args=()
[ -n "$FEATURIZER_FROM" ] && cpu_args=(--featurizer-from "$FEATURIZER_FROM")
wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

for op in spmm sddmm; do
  cpu_model="$OUT/cpu-$op.safetensors"
  # Counted up front: a failing count (e.g. a broken environment) must stop the script,
  # not read as "no records" inside a test.
  cpu_ok="$(ok_records cpu "$op")"
  if ! wanted "cpu-$op"; then
    :
  elif [ "$cpu_ok" -gt 0 ]; then
    cmd=(pretrain --db "$SNAP" --target cpu --op "$op" --preset "$PRESET" "${epochs_args[@]}" "${pretrain_args[@]}" "${cpu_args[@]}" -o "$cpu_model")
    echo "== cognate ${cmd[*]}"
    cognate "${cmd[@]}"
    with_portfolio "$cpu_model"
    provenance "$cpu_model" "${cmd[@]}"
  else
    echo "== cpu $op: no ok records in $DB, skipped"
  fi

  gpu_model="$OUT/gpu-$op.safetensors"
  if wanted "gpu-$op" && [ -f "$cpu_model" ] && [ "$(ok_records gpu "$op")" -eq 0 ]; then
    # No gpu runtime anywhere: the cpu model carried over, labelled zero-shot (no scores).
    cmd=(finetune --model "$cpu_model" --db "$SNAP" --target gpu --op "$op" --zero-shot --without-records -o "$gpu_model")
    echo "== cognate ${cmd[*]}"
    cognate "${cmd[@]}"
    provenance "$gpu_model" "${cmd[@]}"
  fi

  # spade: the scaled machine of the published records; spade-calibrated: the calibrated
  # machine (data/records/calibrated). Each is trained where the store has its records.
  for spade in spade spade-calibrated; do
    spade_model="$OUT/$spade-$op.safetensors"
    wanted "$spade-$op" || continue
    if [ "$(ok_records "$spade" "$op")" -eq 0 ]; then
      echo "== $spade $op: no ok records in $DB, skipped"
      continue
    fi
    if [ "$SPADE_MODE" = finetune ] && [ -f "$cpu_model" ] && cognate finetune --help >/dev/null 2>&1; then
      cmd=(finetune --model "$cpu_model" --db "$SNAP" --target "$spade" --op "$op" "${epochs_args[@]}" -o "$spade_model")
      [ -n "$SPADE_MATRICES" ] && cmd+=(--matrices "$SPADE_MATRICES")
    else
      cmd=(pretrain --db "$SNAP" --target "$spade" --op "$op" --preset "$PRESET" "${epochs_args[@]}" "${pretrain_args[@]}" -o "$spade_model")
    fi
    echo "== cognate ${cmd[*]}"
    cognate "${cmd[@]}"
    with_portfolio "$spade_model"
    provenance "$spade_model" "${cmd[@]}"
  done
done
ls -l "$OUT"
