#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtualenv in .venv with cognate and its
# dependencies. torch is pinned exactly (a range would pull a multi-GB CUDA build).
# COGNATE_MINKOWSKI=1 also builds (or reuses a cached wheel of) MinkowskiEngine, which
# takes 10-20 minutes the first time, and fails set-up when it does not build; without it
# the pure-PyTorch backend is used.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[dev,bench,pyg]'
if [ "${COGNATE_MINKOWSKI:-0}" = "1" ]; then
  # Requested, so a failed build is an error (CI would otherwise pass with the
  # backend-equality test skipped); without COGNATE_MINKOWSKI nothing is built.
  if ! bash scripts/install_minkowski.sh .venv; then
    echo "ERROR: COGNATE_MINKOWSKI=1 but MinkowskiEngine did not build (see above)" >&2
    exit 1
  fi
  .venv/bin/python - <<'PY'
import sys

from cognate.model import sparseconv

if sparseconv.minkowski() is None:
    sys.exit(f"ERROR: COGNATE_MINKOWSKI=1 but cognate cannot use MinkowskiEngine: {sparseconv.minkowski_error()}")
PY
fi
echo "cognate installed in .venv ($(.venv/bin/cognate --version))"
