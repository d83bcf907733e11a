#!/usr/bin/env bash
# Collect this host's cpu SpMM (or SDDMM) records for the host-transfer evaluation: the 159
# matrices of docs/evaluation/hosts-matrices.txt (the shared SuiteSparse, WACO and ngraph >=
# 10k nnz matrices, and 64 generated ones of the scale corpus), the baseline and (SpMM) every
# kernel variant of it on each: the 126 up to 200k nnz ("small") at N = 128, 32 and 512 with 72 sampled configs,
# the 33 above ("large") at N = 128 with 8 (packing and checking a large matrix's configs
# takes about a second each). data/records/zen4 was made this way. Resumable: run it again.
#
#   scripts/collect_host_records.sh --db STORE [--op spmm|sddmm] [--widths "128 32 512"]
#
# Run it on a quiet machine and nothing else beside it: timings share the cores otherwise
# (collect marks records timed while the machine was busy as noisy). About an hour per op
# on a 2-core Zen 4 VM (SDDMM: 16 minutes at N = 128, 9 at 32, 36 at 512).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
SHARED="${COGNATE_SHARED:-$REPO/../shared}"
CORPUS="${COGNATE_CORPUS:-${COGNATE_HOME:-$HOME/.cache/cognate}/corpus}"
DB=""
WIDTHS="128 32 512"
OP=spmm
while [ $# -gt 0 ]; do
  case "$1" in
    --db) DB="$2"; shift 2 ;;
    --widths) WIDTHS="$2"; shift 2 ;;
    --op) OP="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "collect_host_records.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$DB" ] || { echo "collect_host_records.sh: --db STORE is required" >&2; exit 2; }

# the generated matrices: the scale corpus up to 1.2M nnz (about 90 s), written once
if [ ! -d "$CORPUS/scale" ]; then
  "$PY" "$REPO/scripts/make_corpus.py" "$CORPUS/scale" --set scale --max-nnz 1200000
fi

files() {  # the files of one size group
  while read -r source group; do
    [ "$group" = "$1" ] || continue
    case "$source" in
      shared:*) echo "$SHARED/${source#shared:}" ;;
      corpus:*) echo "$CORPUS/${source#corpus:}" ;;
    esac
  done < "$REPO/docs/evaluation/hosts-matrices.txt"
}

for group in small large; do
  configs=72 widths="$WIDTHS"
  [ "$group" = large ] && configs=8 widths=128
  mapfile -t paths < <(files "$group")
  for width in $widths; do
    "$PY" -m cognate collect --target cpu --op "$OP" --width "$width" --configs "$configs" \
      --all-variants --batch 8 --db "$DB" "${paths[@]}"
  done
done
