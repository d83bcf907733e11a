"""The Python API: ``cognate.tune(matrix, ...)`` -> a ``TuneResult``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.model.cost_model import CostModel
from cognate.search import (
    DEFAULT_CANDIDATES,
    DEFAULT_SEED,
    TuneResult,
    record_verified,
    tune_matrix,
)


def as_matrix(matrix: str | Path | Matrix | sp.spmatrix | sp.sparray) -> Matrix:
    """A Matrix from a file path (any format cognate reads), a scipy sparse matrix or a Matrix."""
    if isinstance(matrix, Matrix):
        return matrix
    if isinstance(matrix, str | Path):
        from cognate.formats.read import load_matrix

        return load_matrix(matrix)
    if sp.issparse(matrix):
        csr = canonicalize(matrix)
        if csr.shape[0] == 0 or csr.shape[1] == 0 or csr.nnz == 0:
            raise CognateError(
                f"matrix of shape {csr.shape} with {csr.nnz} nonzeros: nothing to tune"
            )
        return Matrix("matrix", csr, source="scipy")
    raise CognateError(f"tune needs a path or a scipy sparse matrix, got {type(matrix).__name__}")


def tune(
    matrix: str | Path | Matrix | sp.spmatrix | sp.sparray,
    target: str = "cpu",
    op: str = "spmm",
    width: int = 64,
    top_k: int = 5,
    model: str | Path | CostModel | None = None,
    verify: bool = False,
    candidates: int = DEFAULT_CANDIDATES,
    seed: int = DEFAULT_SEED,
    cover_families: bool = True,
    threads: int | None = None,
    record: str | Path | None = None,
    announce: Callable[[str], None] | None = None,
    bf16: bool = False,
) -> TuneResult:
    """Rank schedules of ``op`` on ``target`` for ``matrix`` with a cost model.

    ``model``: a ``CostModel`` or a model file (default: the shipped
    ``data/models/<target>-<op>.safetensors``).
    ``verify``: measure the top-k and the baseline on the target (cpu: also the library).
    ``cover_families``: the top-k includes each kernel family's best-ranked config (cpu: csr,
    dia, bcsr, reordered, panel), in place of the lowest-ranked picks, so the measurement
    decides between them.
    On cpu the top-k, the baseline and the library references (MKL inspector-executor,
    torch.sparse) are timed in interleaved rounds with ``threads`` threads (default: all
    cores); ``result.best`` is the fastest of the top-k and the baseline (the baseline when no
    candidate beat it), ``result.unreliable`` says the machine was busy meanwhile.
    Unverified, ``result.best`` is the model's rank 1, except on a host the model never
    trained on (``result.new_host``) when its own leave-one-host-out evaluation found its
    rank 1 below the baseline config there (``result.new_host_baseline``,
    docs/evaluation/hosts.md): then it is the baseline.
    ``record``: a record store (SQLite file) to keep the verified measurements in.
    ``announce``: called with one line as each long step starts (ranking, verifying).
    ``bf16`` (cpu SpMM with ``verify``, opt-in): also time the pick's plain CSR kernel with B
    rounded to bfloat16 at each call (float32 sums: about 2^-9 relative error per B element;
    half of B's bytes moved), checked against scipy on the rounded B; ``result.best`` may
    then be such a kernel (its description says "B as bf16").
    The result holds the top-k (``result.candidates``), the chosen ``result.config`` and, on
    cpu, ``result.kernel(B, out=None)`` (SpMM) / ``result.kernel(X, Y, out=None)`` (SDDMM)
    running that schedule without copying float32 C-contiguous operands.
    """
    result = tune_matrix(
        as_matrix(matrix),
        target=target,
        op=op,
        width=width,
        top_k=top_k,
        model=model,
        verify=verify,
        candidates=candidates,
        seed=seed,
        cover_families=cover_families,
        threads=threads,
        announce=announce,
        bf16=bf16,
    )
    if record is not None and result.verified:
        record_verified(result, record)
    return result
