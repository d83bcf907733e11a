#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtualenv in .venv with cognate and its
# dependencies. torch is pinned exactly (a range would pull a multi-GB CUDA build).
# COGNATE_MINKOWSKI=1 also builds (or reuses a cached wheel of) MinkowskiEngine, which
# takes 10-20 minutes the first time; without it the pure-PyTorch backend is used.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[dev,bench]'
if [ "${COGNATE_MINKOWSKI:-0}" = "1" ]; then
  if ! bash scripts/install_minkowski.sh .venv; then
    echo "WARNING: MinkowskiEngine build failed: its backend-equality test will be skipped" >&2
  fi
fi
echo "cognate installed in .venv ($(.venv/bin/cognate --version))"
