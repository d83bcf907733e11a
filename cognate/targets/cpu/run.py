"""Run one cpu config in this process: the Python API beside the isolated runner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.config import Config
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu import families
from cognate.targets.cpu.call import BoundKernel


def _knobs(config: Config | Mapping[str, Any]) -> Mapping[str, Any]:
    return config.knobs if isinstance(config, Config) else config


def prepare_kernel(
    matrix: Matrix | sp.spmatrix | sp.sparray,
    op: str,
    config: Config | Mapping[str, Any],
    *operands: np.ndarray,
) -> BoundKernel:
    """Pack A and compile the kernel once; the result runs the product on each call.

    The call reads the operand arrays in place (float32, C-contiguous ones are not copied),
    so new values in them are picked up by the next call; ``.result()`` gives the output.
    A Matrix's ``row_perm`` / ``col_perm`` (if any) are absorbed by DIA/BCSR configs.
    """
    source = matrix if isinstance(matrix, Matrix) else Matrix("A", canonicalize(matrix))
    return families.prepare(source, op, _knobs(config), operands)


def run_config(
    matrix: Matrix | sp.spmatrix | sp.sparray,
    op: str,
    config: Config | Mapping[str, Any],
    *operands: np.ndarray,
) -> np.ndarray | sp.csr_matrix:
    """Run one cpu config in this process and return the product.

    SpMM: ``run_config(A, "spmm", cfg, B)`` -> dense ``A @ B`` (float32). SDDMM:
    ``run_config(A, "sddmm", cfg, X, Y)`` -> CSR with A's pattern, ``A * (X @ Y.T)``.
    Raises CognateError for a bad config, bad operands, or a layout over the size limit.
    """
    source = matrix if isinstance(matrix, Matrix) else Matrix("A", canonicalize(matrix))
    csr = source.csr
    call = prepare_kernel(source, op, config, *operands)
    call()
    if op == "spmm":
        return call.result()
    return sp.csr_matrix((call.result(), csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
