#!/usr/bin/env bash
# The gpu target's device check: kernel tests compiled on CUDA, then every config of both
# spaces on 3 shared matrices and a 1M-nonzero synthetic, tabulated against the baseline
# config and cuSPARSE. Sized for one H200 in under 8 minutes (see docs/gpu.md).
#
#   scripts/gpu_check.sh prepare      # here, with ../shared at hand: copy the matrices into
#                                     # .gpu-data/ and fetch the wheels the image lacks into .whl/
#   scripts/gpu_check.sh [OUT]        # on the GPU machine, from the repository root
#
# The shared folder does not travel to the device: the check reads .gpu-data/ (or
# $COGNATE_GPU_DATA). It needs python3 with CUDA torch, triton, numpy, scipy, PyYAML and
# pydantic (the device image has them); cognate runs from the source tree (PYTHONPATH),
# nothing is installed from a network. Wheels in .whl/ (fast_matrix_market, for cognate's
# matrix reader) are installed into a private folder if present.
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${COGNATE_GPU_DATA:-.gpu-data}   # laid out as the shared folder: matrices/{suitesparse,waco}
COLLECT=(suitesparse/arrow.mtx.gz suitesparse/Groebner_id2003_aug.mtx.gz waco/bcsstk38.csr)
TESTS_ONLY=(suitesparse/lp_share1b.mtx.gz suitesparse/olm500.mtx.gz)
PY=${PYTHON:-python3}

if [[ ${1:-} == prepare ]]; then
    set -e
    src=${COGNATE_SHARED:-../shared}/matrices
    mkdir -p "$DATA/matrices/suitesparse" "$DATA/matrices/waco"
    for m in "${COLLECT[@]}" "${TESTS_ONLY[@]}"; do cp -f "$src/$m" "$DATA/matrices/$m"; done
    # The device has Python 3.12 and no network: fetch fast_matrix_market's wheel for it.
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl fast_matrix_market \
        || echo "gpu_check: no fast_matrix_market wheel; the check falls back to scipy's reader"
    echo "gpu_check: prepared $DATA/ and .whl/; keep both git-ignored and carry them to the device"
    exit 0
fi

OUT=${1:-${OUT:-gpu-check-out}}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/cognate-site .whl/*.whl && export PYTHONPATH=/tmp/cognate-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0 COGNATE_SHARED="$PWD/$DATA"
nvidia-smi -L || true
$PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__,
"cuda", torch.cuda.is_available() and torch.cuda.get_device_name())' | tee "$OUT/versions.txt"
if [[ ! -f $DATA/matrices/${COLLECT[0]} ]]; then
    echo "gpu_check: no matrices in $DATA/: run 'scripts/gpu_check.sh prepare' first" >&2
    exit 1
fi

# 1. The kernel tests, compiled (not interpreted) on the GPU, on the prepared matrices.
timeout 150 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/test_gpu_kernels.py \
    2>&1 | tee "$OUT/tests.log"
tests_rc=${PIPESTATUS[0]}
echo "gpu_check: kernel tests exit code $tests_rc" | tee -a "$OUT/tests.log"

# 2. Every config of both spaces on the prepared matrices and a 1M-nonzero synthetic.
timeout 330 $PY scripts/gpu_check.py --out "$OUT" --budget-s 270 \
    "${COLLECT[@]/#/$DATA/matrices/}" 2>&1 | tee "$OUT/collect.log"
collect_rc=${PIPESTATUS[0]}
echo "gpu_check: tests rc=$tests_rc, collection rc=$collect_rc; table in $OUT/gpu_check.md"
[[ $tests_rc == 0 && $collect_rc == 0 ]]
