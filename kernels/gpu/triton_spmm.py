"""Triton SpMM and SDDMM kernel families for cognate's gpu target (float32, CSR input).

    SpMM   C[M, N] = A[M, K] @ B[K, N]                 (N = the dense width)
    SDDMM  out[nz] = A[nz] * dot(X[row(nz), :], Y[col(nz), :])   (X: M x W, Y: K x W)

Schedule knobs (constexpr or launch options, so each config is its own compiled kernel):
- ``rows_per_program`` (ROWS): rows one program walks, one after another.
- ``dense_tile`` (BN / BK): SpMM, the dense-column tile each program owns (grid axis);
  SDDMM, the tile of the reduction over the dense width (a loop inside the program).
- ``nnz_step`` (NZ): nonzeros loaded and processed per inner step (vector lanes).
- ``split``: ``row`` gives each program ``rows_per_program`` whole rows; ``nnz`` gives each
  program an equal chunk of nonzeros (``rows_per_program`` x mean row length, rounded up
  to a multiple of ``nnz_step``), so one long row is shared by several programs.
  SpMM's nnz split is deterministic: a row cut by a chunk boundary is written by no
  program; each piece goes to a per-chunk partial buffer and a second kernel sums the
  pieces of each cut row in chunk order (no atomics, so results are bit-reproducible).
  SDDMM needs no reduction across programs: every output nonzero has one owner.
- ``reorder``: ``length`` walks rows in order of decreasing length (longest first, stable)
  through an index map ``row_map``; A, B and C are never permuted or copied. Only with the
  row split (a nonzero chunk is defined on A's own storage order).
- ``num_warps``, ``num_stages``: Triton launch options.

The host-side ``plan_*`` functions compute the per-matrix index maps (row permutation,
chunk boundaries, cut-row segments) once per (matrix, config); they are the schedule's
preprocessing and are not part of a timed run. ``run_*`` launches the kernels.

This file lives outside the package (kernels/ holds every target's kernel sources) and is
loaded with importlib by cognate.targets.gpu.kernels. Set ``TRITON_INTERPRET=1`` before
loading it to run the kernels on CPU tensors (tests do).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

# ----------------------------------------------------------------------------- SpMM


@triton.jit
def _segment_dot(
    indices, values, b_ptr, start, end, cols, col_mask, N, BN: tl.constexpr, NZ: tl.constexpr
):
    """Sum over nonzeros [start, end) of one row: v * B[k, cols], NZ nonzeros per step."""
    acc = tl.zeros([BN], dtype=tl.float32)
    for pos in range(start, end, NZ):
        offs = pos + tl.arange(0, NZ)
        nz_mask = offs < end
        k = tl.load(indices + offs, mask=nz_mask, other=0).to(tl.int64)
        v = tl.load(values + offs, mask=nz_mask, other=0.0)
        b = tl.load(
            b_ptr + k[:, None] * N + cols[None, :],
            mask=nz_mask[:, None] & col_mask[None, :],
            other=0.0,
        )
        acc += tl.sum(v[:, None] * b, axis=0)
    return acc


@triton.jit(do_not_specialize=["M"])
def spmm_rows_kernel(
    indptr,
    indices,
    values,
    row_map,
    b_ptr,
    c_ptr,
    M,
    N,
    ROWS: tl.constexpr,
    BN: tl.constexpr,
    NZ: tl.constexpr,
    USE_MAP: tl.constexpr,
):
    """Row split: program (row block, dense tile) computes ROWS output rows x BN columns."""
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    block = pid // n_tiles
    cols = (pid % n_tiles) * BN + tl.arange(0, BN)
    col_mask = cols < N
    for i in range(ROWS):
        slot = block * ROWS + i
        if slot < M:
            if USE_MAP:
                row = tl.load(row_map + slot)
            else:
                row = slot
            start = tl.load(indptr + row)
            end = tl.load(indptr + row + 1)
            acc = _segment_dot(indices, values, b_ptr, start, end, cols, col_mask, N, BN, NZ)
            tl.store(c_ptr + tl.cast(row, tl.int64) * N + cols, acc, mask=col_mask)


@triton.jit(do_not_specialize=["nnz", "chunk"])
def spmm_nnz_kernel(
    indptr,
    indices,
    values,
    chunk_rows,
    b_ptr,
    c_ptr,
    partial_ptr,
    nnz,
    chunk,
    N,
    BN: tl.constexpr,
    NZ: tl.constexpr,
):
    """Nonzero split: program (chunk, dense tile) covers nonzeros [chunk*c, chunk*(c+1)).

    Whole rows go straight to C; a row cut by the chunk's start or end goes to the
    chunk's partial slot 0 (its first row) or 1 (its last row) for the fix-up kernel.
    """
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    c = pid // n_tiles
    cols = (pid % n_tiles) * BN + tl.arange(0, BN)
    col_mask = cols < N
    lo = c * chunk
    hi = tl.minimum(lo + chunk, nnz)
    first = tl.load(chunk_rows + 2 * c)
    last = tl.load(chunk_rows + 2 * c + 1)
    for row in range(first, last + 1):
        row_start = tl.load(indptr + row)
        row_end = tl.load(indptr + row + 1)
        seg_end = tl.minimum(row_end, hi)
        seg_start = tl.maximum(row_start, lo)
        acc = _segment_dot(indices, values, b_ptr, seg_start, seg_end, cols, col_mask, N, BN, NZ)
        # One comparison per mask: the interpreter turns `bool & bool` into int32, which
        # its store rejects; a column limit of 0 disables a store instead.
        whole = (row_start >= lo) & (row_end <= hi)
        whole_limit = tl.where(whole, N, 0)
        slot = 2 * c + tl.cast(row != first, tl.int64)
        tl.store(c_ptr + tl.cast(row, tl.int64) * N + cols, acc, mask=cols < whole_limit)
        tl.store(partial_ptr + slot * N + cols, acc, mask=cols < N - whole_limit)


@triton.jit
def spmm_fixup_kernel(fix_rows, fix_start, fix_slots, partial_ptr, c_ptr, N, BN: tl.constexpr):
    """C[row] = sum of the row's partial pieces, in chunk order (deterministic)."""
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    u = pid // n_tiles
    cols = (pid % n_tiles) * BN + tl.arange(0, BN)
    col_mask = cols < N
    row = tl.load(fix_rows + u).to(tl.int64)
    acc = tl.zeros([BN], dtype=tl.float32)
    for t in range(tl.load(fix_start + u), tl.load(fix_start + u + 1)):
        slot = tl.load(fix_slots + t).to(tl.int64)
        acc += tl.load(partial_ptr + slot * N + cols, mask=col_mask, other=0.0)
    tl.store(c_ptr + row * N + cols, acc, mask=col_mask)


# ----------------------------------------------------------------------------- SDDMM


@triton.jit(do_not_specialize=["M"])
def sddmm_rows_kernel(
    indptr,
    indices,
    values,
    row_map,
    x_ptr,
    y_ptr,
    out_ptr,
    M,
    W,
    ROWS: tl.constexpr,
    BK: tl.constexpr,
    NZ: tl.constexpr,
    USE_MAP: tl.constexpr,
):
    """Row split: program computes all nonzeros of ROWS rows, reducing W in BK tiles."""
    block = tl.program_id(0)
    for i in range(ROWS):
        slot = block * ROWS + i
        if slot < M:
            if USE_MAP:
                row = tl.load(row_map + slot)
            else:
                row = slot
            start = tl.load(indptr + row)
            end = tl.load(indptr + row + 1)
            _sddmm_segment(indices, values, x_ptr, y_ptr, out_ptr, row, start, end, W, BK, NZ)


@triton.jit(do_not_specialize=["nnz", "chunk"])
def sddmm_nnz_kernel(
    indptr,
    indices,
    values,
    chunk_rows,
    x_ptr,
    y_ptr,
    out_ptr,
    nnz,
    chunk,
    W,
    BK: tl.constexpr,
    NZ: tl.constexpr,
):
    """Nonzero split: program computes the nonzeros [chunk*c, chunk*(c+1)), row by row."""
    c = tl.program_id(0)
    lo = c * chunk
    hi = tl.minimum(lo + chunk, nnz)
    first = tl.load(chunk_rows + 2 * c)
    last = tl.load(chunk_rows + 2 * c + 1)
    for row in range(first, last + 1):
        start = tl.maximum(tl.load(indptr + row), lo)
        end = tl.minimum(tl.load(indptr + row + 1), hi)
        _sddmm_segment(indices, values, x_ptr, y_ptr, out_ptr, row, start, end, W, BK, NZ)


@triton.jit
def _sddmm_segment(
    indices, values, x_ptr, y_ptr, out_ptr, row, start, end, W, BK: tl.constexpr, NZ: tl.constexpr
):
    x_row = x_ptr + tl.cast(row, tl.int64) * W
    for pos in range(start, end, NZ):
        offs = pos + tl.arange(0, NZ)
        nz_mask = offs < end
        k = tl.load(indices + offs, mask=nz_mask, other=0).to(tl.int64)
        acc = tl.zeros([NZ], dtype=tl.float32)
        for w0 in range(0, W, BK):
            ws = w0 + tl.arange(0, BK)
            w_mask = ws < W
            x = tl.load(x_row + ws, mask=w_mask, other=0.0)
            y = tl.load(
                y_ptr + k[:, None] * W + ws[None, :],
                mask=nz_mask[:, None] & w_mask[None, :],
                other=0.0,
            )
            acc += tl.sum(y * x[None, :], axis=1)
        v = tl.load(values + offs, mask=nz_mask, other=0.0)
        tl.store(out_ptr + offs, acc * v, mask=nz_mask)


# ----------------------------------------------------------------------------- host side

KNOBS = ("rows_per_program", "dense_tile", "nnz_step", "split", "reorder")


@dataclass
class Csr:
    """A CSR matrix as device tensors (int32 indices, float32 values) plus host indptr."""

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    shape: tuple[int, int]
    indptr_host: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.indices.numel())


def to_device(csr, device: str | torch.device) -> Csr:
    """Move a canonical scipy CSR matrix (int32 indices, float32 values) to ``device``."""
    indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
    return Csr(
        indptr=torch.from_numpy(indptr).to(device),
        indices=torch.from_numpy(np.ascontiguousarray(csr.indices, dtype=np.int32)).to(device),
        values=torch.from_numpy(np.ascontiguousarray(csr.data, dtype=np.float32)).to(device),
        shape=(int(csr.shape[0]), int(csr.shape[1])),
        indptr_host=indptr,
    )


@dataclass
class Plan:
    """Per-(matrix, config) index maps; ``None`` fields are not used by the config."""

    row_map: torch.Tensor | None = None  # row split with reorder: slot -> row
    chunk: int = 0  # nnz split: nonzeros per program
    n_chunks: int = 0
    chunk_rows: torch.Tensor | None = None  # [2 * n_chunks]: first and last row per chunk
    fix_rows: torch.Tensor | None = None  # SpMM nnz split: rows cut by chunk boundaries
    fix_start: torch.Tensor | None = None  # [len(fix_rows) + 1] offsets into fix_slots
    fix_slots: torch.Tensor | None = None  # partial-buffer slots, grouped by row


def chunk_size(indptr: np.ndarray, rows_per_program: int, nnz_step: int) -> int:
    """Nonzeros per program of the nnz split: rows_per_program mean rows, whole steps."""
    n_rows = len(indptr) - 1
    nnz = int(indptr[-1])
    mean = max(1, -(-nnz // max(n_rows, 1)))
    steps = max(1, -(-(rows_per_program * mean) // nnz_step))
    return steps * nnz_step


def make_plan(a: Csr, knobs: dict, with_fixup: bool) -> Plan:
    """Index maps for one config: a row permutation, or chunk bounds and cut rows."""
    indptr = a.indptr_host.astype(np.int64)
    device = a.indices.device
    if knobs["split"] == "row":
        if knobs["reorder"] == "none":
            return Plan()
        lengths = np.diff(indptr)
        order = np.argsort(-lengths, kind="stable").astype(np.int32)
        return Plan(row_map=torch.from_numpy(order).to(device))
    nnz = a.nnz
    chunk = chunk_size(indptr, knobs["rows_per_program"], knobs["nnz_step"])
    n_chunks = -(-nnz // chunk)
    lo = np.arange(n_chunks, dtype=np.int64) * chunk
    hi = np.minimum(lo + chunk, nnz)
    # searchsorted(side="right") - 1 skips empty rows: it lands on the row holding the nonzero
    first = np.searchsorted(indptr, lo, side="right") - 1
    last = np.searchsorted(indptr, hi - 1, side="right") - 1
    rows = np.stack([first, last], axis=1).reshape(-1).astype(np.int32)
    plan = Plan(chunk=chunk, n_chunks=n_chunks, chunk_rows=torch.from_numpy(rows).to(device))
    if with_fixup:
        _add_fixup(plan, indptr, lo, hi, first, last, device)
    return plan


def _add_fixup(plan: Plan, indptr, lo, hi, first, last, device) -> None:
    """The cut rows and, per cut row, its partial slots in chunk order."""
    cut_first = (indptr[first] < lo) | (indptr[first + 1] > hi)
    cut_last = (last != first) & (indptr[last + 1] > hi)
    slot_rows = np.stack([np.where(cut_first, first, -1), np.where(cut_last, last, -1)], axis=1)
    slot_rows = slot_rows.reshape(-1)
    slots = np.flatnonzero(slot_rows >= 0)  # ascending slot = chunk order; rows nondecreasing
    rows, starts = np.unique(slot_rows[slots], return_index=True)
    offsets = np.append(starts, len(slots)).astype(np.int32)
    plan.fix_rows = torch.from_numpy(rows.astype(np.int32)).to(device)
    plan.fix_start = torch.from_numpy(offsets).to(device)
    plan.fix_slots = torch.from_numpy(slots.astype(np.int32)).to(device)


def launch_options(knobs: dict) -> dict:
    return {"num_warps": int(knobs["num_warps"]), "num_stages": int(knobs["num_stages"])}


def run_spmm(a: Csr, b: torch.Tensor, knobs: dict, plan: Plan, out: torch.Tensor) -> None:
    """out = A @ b with the config ``knobs`` (out: M x N float32, contiguous)."""
    m, n = a.shape[0], b.shape[1]
    bn = int(knobs["dense_tile"])
    nz = int(knobs["nnz_step"])
    n_tiles = triton.cdiv(n, bn)
    opts = launch_options(knobs)
    if knobs["split"] == "row":
        rows = int(knobs["rows_per_program"])
        use_map = plan.row_map is not None
        row_map = plan.row_map if use_map else a.indptr
        grid = (triton.cdiv(m, rows) * n_tiles,)
        spmm_rows_kernel[grid](
            a.indptr, a.indices, a.values, row_map, b, out, m, n,
            ROWS=rows, BN=bn, NZ=nz, USE_MAP=use_map, **opts,
        )  # fmt: skip
        return
    out.zero_()  # rows without nonzeros belong to no chunk
    if plan.n_chunks == 0:
        return
    partial = torch.empty((2 * plan.n_chunks, n), dtype=torch.float32, device=b.device)
    spmm_nnz_kernel[(plan.n_chunks * n_tiles,)](
        a.indptr, a.indices, a.values, plan.chunk_rows, b, out, partial, a.nnz, plan.chunk, n,
        BN=bn, NZ=nz, **opts,
    )  # fmt: skip
    n_fix = plan.fix_rows.numel()
    if n_fix:
        spmm_fixup_kernel[(n_fix * n_tiles,)](
            plan.fix_rows, plan.fix_start, plan.fix_slots, partial, out, n, BN=bn, **opts
        )


def run_sddmm(
    a: Csr, x: torch.Tensor, y: torch.Tensor, knobs: dict, plan: Plan, out: torch.Tensor
) -> None:
    """out[nz] = A[nz] * <x[row], y[col]> for every nonzero (out: nnz float32)."""
    m, w = a.shape[0], x.shape[1]
    bk = int(knobs["dense_tile"])
    nz = int(knobs["nnz_step"])
    opts = launch_options(knobs)
    if knobs["split"] == "row":
        rows = int(knobs["rows_per_program"])
        use_map = plan.row_map is not None
        row_map = plan.row_map if use_map else a.indptr
        sddmm_rows_kernel[(triton.cdiv(m, rows),)](
            a.indptr, a.indices, a.values, row_map, x, y, out, m, w,
            ROWS=rows, BK=bk, NZ=nz, USE_MAP=use_map, **opts,
        )  # fmt: skip
        return
    if plan.n_chunks == 0:
        return
    sddmm_nnz_kernel[(plan.n_chunks,)](
        a.indptr, a.indices, a.values, plan.chunk_rows, x, y, out, a.nnz, plan.chunk, w,
        BK=bk, NZ=nz, **opts,
    )  # fmt: skip
