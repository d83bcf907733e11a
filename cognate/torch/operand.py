"""``TunedSparse``: a sparse matrix A whose SpMM / SDDMM schedules are tuned once per dense
width and kept prepared (packed A, compiled kernel) for PyTorch's forward and backward.

Training needs three products of A per width w: ``A @ X`` (forward), ``A^T @ dY`` (the
features' gradient) and the SDDMM ``dY @ X^T`` sampled at A's pattern (the values' gradient).
Each is a cognate cpu kernel of its own schedule:

- A: ``cognate.tune(A, op="spmm", width=w)``;
- A^T: when A's pattern is symmetric (undirected graphs, GCN's normalised adjacency) A^T is
  the very same packed kernel (its values loaded through the transpose map only when they
  differ from A's); otherwise A^T is packed on its own and runs A's schedule
  (``transpose="reuse"``, the default: no second ranking; when A's layout is over the size
  limit for A^T, A^T is tuned) or is tuned as its own operand (``transpose="tune"``). Reuse
  is the default because the shipped model ranks A's schedule first for A^T too and A^T's
  own ranking costs seconds per width (the measurement: docs/torch.md, "A^T");
- the SDDMM of A's pattern (unit values; A's values multiply outside, in torch, so one
  kernel serves the forward of ``sddmm`` and the values' gradient of ``spmm``).

The kernels read A's values from their packed layout on every call. The values used in a
call are a torch tensor (``ts.values`` or a ``values=`` argument, in A's canonical CSR
order); they are scattered into a kernel's layout only when they differ from what it holds
(another tensor, or the same tensor after an in-place change: its ``_version``). Changing a
tensor through ``.data`` or numpy bypasses that counter: call ``ts.reload()`` after it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.targets.cpu.memory import check_room, transpose_bytes
from cognate.targets.cpu.operands import check_live_tensor, zero_pages
from cognate.targets.cpu.tuned import TunedKernel
from cognate.torch.choices import Choice, TuneOptions, choose
from cognate.torch.inputs import as_operand_matrix
from cognate.torch.ops import SparseOperand, register, spmm
from cognate.torch.order import NODE_ORDERS, NodeOrder, choose_node_order, node_order
from cognate.util import positive_int

TRANSPOSES = ("reuse", "tune")
SCHEDULES = (None, "baseline")  # None: tuned; "baseline": the space's baseline, no ranking


@dataclass
class _Prepared:
    """One packed kernel (a kernel may serve A and A^T) and where A's values go in it."""

    kernel: TunedKernel
    slots: np.ndarray | None  # A's CSR entry -> slot in kernel.packed_values (None: fixed)


def transposed(matrix: Matrix) -> tuple[Matrix, np.ndarray]:
    """(A^T as a Matrix, tmap): A^T's CSR entry e holds A's CSR entry ``tmap[e]``. A's index
    maps swap (``A^T[col_perm[j], row_perm[i]] = S^T[j, i]``) so DIA/BCSR schedules of A^T run
    over S^T too."""
    csr = matrix.csr
    ids = sp.csr_matrix(
        (np.arange(csr.nnz, dtype=np.int64), csr.indices, csr.indptr), shape=csr.shape
    )
    t = ids.T.tocsr()
    t.sort_indices()
    tmap = np.asarray(t.data, dtype=np.int64)
    # int32 offsets while the entry count fits them (what the kernels' packs expect), else
    # 64-bit: a silent int32 wrap past 2^31 entries would scramble A^T's rows.
    offsets = np.int32 if csr.nnz < 2**31 else np.int64
    at = sp.csr_matrix(
        (csr.data[tmap], t.indices.astype(np.int32), t.indptr.astype(offsets)),
        shape=(csr.shape[1], csr.shape[0]),
    )
    name = f"{matrix.name}^T"
    return Matrix(name, at, f"transpose of {matrix.source or matrix.name}", matrix.field,
                  matrix.symmetry, matrix.col_perm, matrix.row_perm), tmap  # fmt: skip


class TunedSparse(SparseOperand):
    """A sparse matrix A, tuned per dense width, for ``cognate.torch.spmm`` / ``sddmm``.

    ``A``: a scipy sparse matrix, a cognate ``Matrix`` (its index maps are kept), a matrix
    file path, or a torch sparse COO / CSR tensor. Its canonical CSR (sorted, de-duplicated)
    orders ``values``. ``widths``: dense widths tuned now (SpMM of A and A^T; the SDDMM too
    when ``requires_grad``); any other width is tuned on first use. ``target``: "cpu" (the
    only target whose kernels run in this process). ``model``, ``verify``, ``candidates``,
    ``seed``, ``threads``: as ``cognate.tune`` (default: ranked by the shipped model, not
    measured). ``store``: a record store whose measurements of this matrix are reused, and
    where verified choices are recorded. ``requires_grad``: ``values`` is an
    ``nn.Parameter`` (A's values train). ``transpose``: "reuse" or "tune" (module docstring).

    ``order``: None (A as given) or a node order of a square A (cognate.torch.order):
    "identity", "rcm", "degree", "cluster", or "auto" (needs ``verify=True``: the candidate
    measured fastest by ``choose_node_order`` at the first of ``widths``). With an order, A is
    replaced by P A P^T for everything (``ts.matrix``, the tuned kernels, ``ts.values`` and
    any ``values=`` in P A P^T's canonical CSR order, ``to_torch``; a Matrix's index maps are
    not carried over); ``ts.node_order`` is the NodeOrder, and the caller keeps its dense
    operands in the order: ``ts.to_order(X)`` in, ``ts.from_order(Y)`` out (identity functions
    without an order). ``order_seconds``: "auto"'s medians per candidate (else None).

    ``schedule``: None (tuned as above) or "baseline": every op and width runs the space's
    baseline schedule (WACO's FixedCSR), nothing ranked: for a matrix used once or a few
    times (a mini-batch's sampled adjacency); its compiled kernel is shared by every matrix
    at that width (the kernel cache is per source).

    ``tuning_s`` is the time spent choosing schedules and packing/compiling (and the node
    order), ``choices`` what each (op, side, width) runs and where its choice came from.
    """

    def __init__(
        self,
        A: Any,
        widths: Iterable[int] = (),
        target: str = "cpu",
        model: str | Path | Any | None = None,
        verify: bool = False,
        store: str | Path | None = None,
        requires_grad: bool = False,
        transpose: str = "reuse",
        candidates: int | None = None,
        seed: int | None = None,
        threads: int | None = None,
        order: str | None = None,
        schedule: str | None = None,
    ) -> None:
        if target != "cpu":
            raise CognateError(
                f"cognate.torch runs cpu kernels only; target {target!r} has no kernel that"
                " runs in this process"
            )
        if transpose not in TRANSPOSES:
            raise CognateError(
                f"transpose must be one of {', '.join(TRANSPOSES)}, got {transpose!r}"
            )
        self.matrix = as_operand_matrix(A)
        if schedule not in SCHEDULES:
            raise CognateError(
                f"schedule must be one of {', '.join(map(str, SCHEDULES))}, got"
                f" {repr(schedule)[:40]}"
            )
        self.options = TuneOptions(
            target, model, verify, store, candidates, seed, threads, schedule=schedule
        )
        self.node_order: NodeOrder | None = None
        self.order_seconds: dict[str, float] | None = None
        self.tuning_s = 0.0
        if order is not None:
            widths = tuple(widths)
            start = time.perf_counter()
            self.matrix = self._ordered(order, widths, verify, threads)
            self.tuning_s = time.perf_counter() - start
        self.transpose = transpose
        self.shape = self.matrix.shape
        self.nnz = self.matrix.nnz
        values = torch.from_numpy(self.matrix.csr.data.copy())
        self.values: torch.Tensor = torch.nn.Parameter(values) if requires_grad else values
        self._initial = (self.values, self.values._version)
        self._lock = threading.RLock()
        self._prepared: dict[tuple[str, str, int], _Prepared] = {}
        # id(kernel) -> (values tensor, its _version, orientation) the kernel holds. Held by
        # a weak reference: trained values (attention weights) carry an autograd graph whose
        # nodes keep this operand alive (ctx.operand), a cycle through C++ that Python's
        # collector cannot see, so a strong one leaked every mini-batch's graph and kernels.
        self._loaded: dict[int, tuple[weakref.ref, int, str]] = {}
        self._depth = 0
        self._transposed: tuple[Matrix, np.ndarray] | None = None
        self._pattern: Matrix | None = None
        self.choices: dict[tuple[str, str, int], Choice] = {}
        self._symmetry: tuple[bool, bool] | None = None  # (pattern, values): on first need
        self.handle = register(self)
        for width in widths:
            self.prepare(width, sddmm=requires_grad)

    # --- building --------------------------------------------------------------------------

    def _ordered(
        self, order: str, widths: tuple[int, ...], verify: bool, threads: int | None
    ) -> Matrix:
        """P A P^T for ``order`` (sets ``node_order`` and, for "auto", ``order_seconds``)."""
        if order == "auto":
            if not verify:
                raise CognateError(
                    "order='auto' measures the candidate node orders: it needs verify=True"
                    " (or name an order: identity, rcm, degree, cluster)"
                )
            if not widths:
                raise CognateError("order='auto' picks at the first of widths: give widths")
            chosen, self.order_seconds, _ = choose_node_order(
                self.matrix, widths[0], threads=threads
            )
        elif order in NODE_ORDERS:
            chosen = node_order(self.matrix, order)
        else:
            raise CognateError(
                f"order must be None, auto or one of {', '.join(NODE_ORDERS)}, got"
                f" {repr(order)[:40]}"
            )
        self.node_order = chosen
        m = self.matrix
        source = f"{chosen.by} node order of {m.source or m.name}"
        return Matrix(f"{m.name}@{chosen.by}", chosen.apply(m), source, m.field, m.symmetry)

    def to_order(self, x: Any) -> Any:
        """``x``'s rows (one per node) in ``node_order`` (``x`` itself without an order)."""
        return x if self.node_order is None else self.node_order.to_order(x)

    def from_order(self, y: Any) -> Any:
        """Rows in ``node_order`` back to A's numbering (``y`` itself without an order)."""
        return y if self.node_order is None else self.node_order.from_order(y)

    @property
    def _symmetric(self) -> tuple[bool, bool]:
        """(pattern symmetric, values symmetric too), found at the first need of A^T: a
        matrix whose backward never runs (inference, a mini-batch without grad) never
        builds A^T."""
        if self._symmetry is None:
            self._symmetry = self._check_symmetric()
        return self._symmetry

    def _check_symmetric(self) -> tuple[bool, bool]:
        """(pattern symmetric, values symmetric too)."""
        csr = self.matrix.csr
        if csr.shape[0] != csr.shape[1]:
            return False, False
        at, tmap = self._transpose()
        if not (
            np.array_equal(at.csr.indptr, csr.indptr)
            and np.array_equal(at.csr.indices, csr.indices)
        ):
            return False, False
        return True, bool(np.array_equal(csr.data[tmap], csr.data))

    def _transpose(self) -> tuple[Matrix, np.ndarray]:
        if self._transposed is None:
            what = "building A^T for the backward pass"
            check_room(self.matrix, what, transpose_bytes(self.matrix))
            self._transposed = transposed(self.matrix)
        return self._transposed

    def prepare(self, width: int, sddmm: bool = False) -> None:
        """Tune and prepare the SpMM kernels of A and A^T (and the SDDMM) at ``width``."""
        self._kernel("spmm", "A", width)
        self._kernel("spmm", "T", width)
        if sddmm:
            self._kernel("sddmm", "A", width)

    @property
    def symmetric(self) -> bool:
        """Whether A's pattern is symmetric (A^T then runs on A's own kernel)."""
        return self._symmetric[0]

    @property
    def widths(self) -> tuple[int, ...]:
        """The widths with a prepared forward kernel."""
        return tuple(sorted({w for (op, side, w) in self._prepared if (op, side) == ("spmm", "A")}))

    def _kernel(self, op: str, side: str, width: int) -> _Prepared:
        key = (op, side, width)
        found = self._prepared.get(key)
        if found is not None:
            return found
        positive_int(width, "dense width")
        start = time.perf_counter()
        self._depth += 1
        try:
            prepared = self._build(op, side, width)
        finally:
            self._depth -= 1
            if self._depth == 0:  # nested builds (A^T's reuse of A) are counted once
                self.tuning_s += time.perf_counter() - start
        if prepared.slots is not None and id(prepared.kernel) not in self._loaded:
            # packed from A (or A^T) itself: it holds A's initial values in that orientation
            initial, version = self._initial
            self._loaded[id(prepared.kernel)] = (weakref.ref(initial), version, side)
        self._prepared[key] = prepared
        return prepared

    def _build(self, op: str, side: str, width: int) -> _Prepared:
        if op == "sddmm":  # A's pattern with unit values, fixed for good
            choice = self._choose(self.matrix, op, width, key=(op, side, width))
            return _Prepared(self._pack(self._unit_pattern(), op, choice, width), None)
        if side == "A":
            choice = self._choose(self.matrix, op, width, key=(op, side, width))
            kernel = self._pack(self.matrix, op, choice, width)
            return _Prepared(kernel, np.ascontiguousarray(kernel.value_slots, dtype=np.int64))
        at, tmap = self._transpose()
        if self._symmetric[0]:  # A^T has A's pattern: the same packed kernel
            forward = self._kernel(op, "A", width)
            self.choices[(op, side, width)] = self.choices[(op, "A", width)]
            return _Prepared(forward.kernel, _compose(forward.kernel.value_slots, tmap))
        if self.transpose == "reuse":
            forward = self._kernel(op, "A", width)
            config = self.choices[(op, "A", width)].config
            try:
                kernel = self._pack(at, op, Choice(config, "reused from A", 0.0), width)
                self.choices[(op, side, width)] = Choice(config, "reused from A", 0.0)
                return _Prepared(kernel, _compose(kernel.value_slots, tmap))
            except CognateError:  # A's layout does not fit A^T (over the size limit): tune
                pass
        choice = self._choose(at, op, width, key=(op, side, width))
        kernel = self._pack(at, op, choice, width)
        return _Prepared(kernel, _compose(kernel.value_slots, tmap))

    def _choose(self, matrix: Matrix, op: str, width: int, key: tuple[str, str, int]) -> Choice:
        choice = choose(matrix, op, width, self.options)
        self.choices[key] = choice
        return choice

    def _pack(self, matrix: Matrix, op: str, choice: Choice, width: int) -> TunedKernel:
        """Pack A and compile the kernel (dense operands are untouched zero pages: nothing
        runs on them, the real ones are bound at the first call)."""
        rows, cols = matrix.shape
        dense = (
            (zero_pages((cols, width), np.float32),)
            if op == "spmm"
            else (zero_pages((rows, width), np.float32), zero_pages((cols, width), np.float32))
        )
        return TunedKernel(matrix, op, choice.config, dense)

    def _unit_pattern(self) -> Matrix:
        if self._pattern is None:
            m = self.matrix
            csr = m.csr.copy()
            csr.data = np.ones_like(csr.data)
            self._pattern = Matrix(f"{m.name}-pattern", csr, m.source, "pattern", m.symmetry,
                                   m.row_perm, m.col_perm)  # fmt: skip
        return self._pattern

    # --- running (called by the custom ops in cognate.torch.ops) ---------------------------

    def run_spmm(self, x: torch.Tensor, values: torch.Tensor, transpose: bool) -> torch.Tensor:
        """A @ x (A^T @ x when ``transpose``) with A's values ``values``: float32 cpu tensors
        of checked shapes (the ops check them; the backward's saved tensors are checked
        again here: offloading may have freed them since)."""
        check_live_tensor(x, "cognate.torch.spmm: X")
        check_live_tensor(values, "cognate.torch.spmm: values")
        x = x.detach().contiguous()
        width = x.shape[1]
        rows = self.shape[1] if transpose else self.shape[0]
        out = torch.empty((rows, width), dtype=torch.float32)
        if width == 0 or rows == 0:
            return out
        with self._lock:
            side = "T" if transpose else "A"
            prepared = self._kernel("spmm", side, width)
            self._load(prepared, values, side)
            prepared.kernel.run((x.numpy(),), out.numpy())
        return out

    def run_sddmm(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(x @ y^T) sampled at A's pattern (unit values), A's CSR order."""
        check_live_tensor(x, "cognate.torch.sddmm: X")
        check_live_tensor(y, "cognate.torch.sddmm: Y")
        x, y = x.detach().contiguous(), y.detach().contiguous()
        out = torch.empty(self.nnz, dtype=torch.float32)
        if x.shape[1] == 0:
            return out.zero_()
        with self._lock:
            prepared = self._kernel("sddmm", "A", x.shape[1])
            prepared.kernel.sddmm_values((x.numpy(), y.numpy()), out.numpy())
        return out

    def _load(self, prepared: _Prepared, values: torch.Tensor, side: str) -> None:
        """Scatter ``values`` into the kernel's layout unless it holds them already."""
        initial, version = self._initial
        orientation = side
        if side == "T" and values is initial and values._version == version and self._symmetric[1]:
            orientation = "A"  # a symmetric A's own values are A^T's: no reload between them
        held = self._loaded.get(id(prepared.kernel))
        if (
            held is not None
            and held[0]() is values  # a dead reference: another tensor, whatever its id
            and held[1:] == (values._version, orientation)
        ):
            return
        data = values.detach().contiguous().numpy()
        prepared.kernel.packed_values[prepared.slots] = data
        self._loaded[id(prepared.kernel)] = (weakref.ref(values), values._version, orientation)

    def reload(self) -> None:
        """Forget which values the kernels hold (after changing values behind autograd's
        version counter, e.g. through ``.data`` or numpy): the next call loads them again."""
        with self._lock:
            self._loaded.clear()
            self._initial = (self._initial[0], -1)

    # --- conveniences ----------------------------------------------------------------------

    def __matmul__(self, x: torch.Tensor) -> torch.Tensor:
        return spmm(self, x)

    def matmul(self, x: torch.Tensor, values: torch.Tensor | None = None) -> torch.Tensor:
        """``cognate.torch.spmm(self, x, values)``; the form to use inside ``torch.compile``
        (``ts @ x`` breaks the graph there: dynamo does not trace ``@`` on a Python object)."""
        return spmm(self, x, values)

    def to_torch(self, values: torch.Tensor | None = None) -> torch.Tensor:
        """A (or A's pattern with ``values``) as a torch sparse CSR tensor."""
        csr = self.matrix.csr
        vals = self.values if values is None else values
        return torch.sparse_csr_tensor(
            torch.from_numpy(csr.indptr.astype(np.int64)),
            torch.from_numpy(csr.indices.astype(np.int64)),
            vals,
            size=self.shape,
        )

    def __repr__(self) -> str:
        return (
            f"TunedSparse({self.matrix.name}, shape={self.shape}, nnz={self.nnz},"
            f" widths={self.widths}, symmetric={self.symmetric})"
        )


def _compose(kernel_slots: np.ndarray, tmap: np.ndarray) -> np.ndarray:
    """A's CSR entry -> slot, for a kernel over A^T whose entry e is A's entry tmap[e]."""
    slots = np.empty(tmap.size, dtype=np.int64)
    slots[tmap] = kernel_slots
    return slots
