#!/usr/bin/env bash
# Build (once) and install a CPU-only MinkowskiEngine 0.5.4 wheel into a virtualenv.
#
#   scripts/install_minkowski.sh [TARGET_VENV]      (default: $VIRTUAL_ENV, else ./.venv)
#
# Why a recipe and not `pip install MinkowskiEngine` (docs/architecture.md, Facts measured here): its setup.py
# needs numpy.distutils (numpy < 2) and setuptools < 70, which conflict with the project's
# own environment, so the wheel is built in a separate build venv holding the SAME torch
# (the extension links against torch's ABI) and then installed with --no-deps.
# The wheel is cached outside the repository; a second run reuses it (idempotent).
#
# Environment: COGNATE_WHEEL_CACHE (default ~/.cache/cognate/wheels),
#              COGNATE_ME_BUILD_VENV (default ~/.cache/cognate/minkowski-build-venv),
#              MAX_JOBS (default 2).
set -euo pipefail

ME_VERSION=0.5.4
TORCH_VERSION=2.13.0
TARGET_VENV="${1:-${VIRTUAL_ENV:-$PWD/.venv}}"
WHEEL_CACHE="${COGNATE_WHEEL_CACHE:-$HOME/.cache/cognate/wheels}"
BUILD_VENV="${COGNATE_ME_BUILD_VENV:-$HOME/.cache/cognate/minkowski-build-venv}"
export MAX_JOBS="${MAX_JOBS:-2}"

log() { echo "[install_minkowski] $*" >&2; }

if [[ ! -x "$TARGET_VENV/bin/python" ]]; then
    log "no python in target venv $TARGET_VENV"
    exit 2
fi

if "$TARGET_VENV/bin/python" -c \
    'import collections, collections.abc; collections.Sequence = collections.abc.Sequence; import MinkowskiEngine' \
    2>/dev/null; then
    log "MinkowskiEngine already importable in $TARGET_VENV"
    exit 0
fi

find_wheel() {
    local w
    for w in "$WHEEL_CACHE"/MinkowskiEngine-"$ME_VERSION"-*.whl; do
        [[ -f "$w" ]] && { echo "$w"; return 0; }
    done
    return 0
}

build_wheel() {
    # OpenBLAS headers and library: the CPU backend's BLAS.
    if ! dpkg -s libopenblas-dev >/dev/null 2>&1; then
        log "installing libopenblas-dev (Debian)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev
    fi
    local py
    py="$("$TARGET_VENV/bin/python" -c 'import sys; print(sys.executable)')"
    if [[ ! -x "$BUILD_VENV/bin/python" ]]; then
        log "creating build venv $BUILD_VENV"
        "$py" -m venv "$BUILD_VENV"
    fi
    log "installing build requirements into $BUILD_VENV"
    "$BUILD_VENV/bin/pip" install -q "torch==$TORCH_VERSION" "numpy>=1.26,<1.27" wheel ninja
    # Separately: torch itself requires a newer setuptools, so one resolve cannot satisfy
    # both; the old setuptools is only needed by MinkowskiEngine's setup.py at build time.
    # pip reports torch's unmet setuptools requirement here; that is expected, not fatal.
    "$BUILD_VENV/bin/pip" install -q "setuptools<70" || true
    "$BUILD_VENV/bin/python" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) >= 70)' \
        || { log "could not install setuptools<70 into $BUILD_VENV"; exit 1; }
    mkdir -p "$WHEEL_CACHE"
    local tmp
    tmp="$(mktemp -d "$WHEEL_CACHE/.build.XXXXXX")"
    log "building MinkowskiEngine $ME_VERSION (MAX_JOBS=$MAX_JOBS; 10-20+ minutes on 2 cores)"
    (cd "$tmp" && BLAS=openblas "$BUILD_VENV/bin/pip" wheel --no-deps --no-build-isolation \
        -w "$tmp" "MinkowskiEngine==$ME_VERSION")
    # Atomic publish into the cache: a concurrent or killed build never leaves half a wheel.
    local built
    for built in "$tmp"/MinkowskiEngine-*.whl; do mv "$built" "$WHEEL_CACHE/"; done
    rm -rf "$tmp"
}

wheel="$(find_wheel)"
if [[ -z "$wheel" ]]; then
    build_wheel
    wheel="$(find_wheel)"
else
    log "reusing cached wheel $wheel"
fi

log "installing $wheel into $TARGET_VENV"
"$TARGET_VENV/bin/pip" install -q --no-deps --force-reinstall "$wheel"
"$TARGET_VENV/bin/python" -c \
    'import collections, collections.abc; collections.Sequence = collections.abc.Sequence; import MinkowskiEngine as ME; print("MinkowskiEngine", ME.__version__)'
