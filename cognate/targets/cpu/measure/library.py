"""The cpu library references, prepared as performance-minded users prepare them.

- MKL's inspector-executor SpMM: ``mkl_sparse_s_create_csr`` once, ``mkl_sparse_set_mm_hint``
  + ``mkl_sparse_optimize`` once (the inspection, timed apart and reported, never hidden),
  then ``mkl_sparse_s_mm`` per call into a preallocated C (row-major, beta 0). Called through
  the ``mkl`` pip package's ``libmkl_rt`` with ctypes (LP64). sparse_dot_mkl is not used: it
  rebuilds the handle on every call and skips optimize (docs/benchmarks.md, The references).
- torch.sparse.mm on a CSR tensor (int32 indices), and for SDDMM
  torch.sparse.sampled_addmm (MKL has no SDDMM).

MKL's code path: on a CPU that is not Intel's, MKL's dispatcher loads its generic code
(``libmkl_def``) whatever the CPU supports. ``COGNATE_MKL_INTEL_PATH=1`` makes it take the
path it takes on an Intel CPU with the same features (``intel_path_shim``); ``mkl_code_path``
says which path a process runs. Benchmarks report both, labelled.

MKL runs on the GNU OpenMP layer (``MKL_THREADING_LAYER=GNU``) so it shares libgomp with the
generated kernels: one thread pool, same waiting policy, and no runtime clash in one process.
Each reference's result is checked against scipy by the caller before any timing counts.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError

MKL_ENV = "MKL_RT"  # path of libmkl_rt to use instead of the one in this environment
INTEL_PATH_ENV = "COGNATE_MKL_INTEL_PATH"  # "1": MKL takes its Intel code path on any vendor
# libmkl_core's dispatcher asks mkl_serv_get_cpu_true (an exported symbol, called through its
# PLT: a definition loaded first wins) for a function that says whether the CPU is Intel's,
# and on "no" loads libmkl_def. This one says yes; MKL then picks its ISA from the CPU's
# feature bits (libmkl_avx512 on AMD Zen 4, checked with MKL 2026.2). The older override,
# mkl_serv_intel_cpu_true, is gone from current MKL. A constant source: nothing reaches it.
INTEL_PATH_SHIM = (
    "static int cognate_cpu_is_intel(void) { return 1; }\n"
    "void *mkl_serv_get_cpu_true(void) { return (void *)cognate_cpu_is_intel; }\n"
)
# MKL sparse enums (mkl_spblas.h): SPARSE_INDEX_BASE_ZERO, SPARSE_OPERATION_NON_TRANSPOSE,
# SPARSE_MATRIX_TYPE_GENERAL / SPARSE_FILL_MODE_LOWER / SPARSE_DIAG_NON_UNIT,
# SPARSE_LAYOUT_ROW_MAJOR; MKL_THREADING_GNU for MKL_Set_Threading_Layer.
INDEX_BASE_ZERO, OPERATION_NON_TRANSPOSE, LAYOUT_ROW_MAJOR = 0, 10, 101
DESCR_GENERAL = (20, 40, 50)
THREADING_GNU = 3
EXPECTED_CALLS = 1000  # the hint: many calls amortise the inspection
MAX_LP64 = 2**31 - 1


class MatrixDescr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("mode", ctypes.c_int), ("diag", ctypes.c_int)]


def find_mkl_rt() -> Path | None:
    """``$MKL_RT``, else the libmkl_rt the ``mkl`` pip package put in this environment."""
    env = os.environ.get(MKL_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    found = sorted(Path(sys.prefix, "lib").glob("libmkl_rt.so*"))
    return found[-1] if found else None


def export_mkl_rt_env() -> Path | None:
    """Set ``$MKL_RT`` (when unset) to this environment's libmkl_rt, for sparse_dot_mkl,
    which finds MKL through that variable; call it before sparse_dot_mkl is imported.
    Returns the library in use, or None when there is none."""
    path = find_mkl_rt()
    if path is not None and MKL_ENV not in os.environ:
        os.environ[MKL_ENV] = str(path)
    return path


_MKL: Any = None


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...; empty if unknown)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def intel_path_differs() -> bool:
    """Whether MKL's Intel path is a different path here (a CPU not made by Intel)."""
    return cpu_vendor() not in ("GenuineIntel", "")


def load_intel_path_shim() -> Path:
    """Make MKL take its Intel code path in this process: load the shim (compiled once) into
    the global symbol scope. Must run before libmkl_rt loads; a CognateError after."""
    from cognate.build import compile_c

    if _MKL is not None or _mkl_mapped():
        raise CognateError("MKL's Intel path: MKL is loaded already in this process")
    path = compile_c(INTEL_PATH_SHIM, openmp=False)
    ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    return path


def _mkl_mapped() -> list[str]:
    """The MKL libraries mapped into this process (``libmkl_<name>.so``)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    names = {line.rsplit("/", 1)[-1].split(".so")[0] for line in maps.splitlines()}
    return sorted(n for n in names if n.startswith("libmkl_"))


CODE_PATHS = ("avx10", "avx512", "avx2", "mc3", "def")  # MKL's per-ISA libraries, best first


def mkl_code_path() -> str:
    """The code path MKL runs in this process (after its first call): the ISA library it
    loaded (``avx512``, ``avx2``, ``mc3``, ``def`` = generic), else ``not loaded``."""
    mapped = _mkl_mapped()
    found = [p for p in CODE_PATHS if f"libmkl_{p}" in mapped]
    return found[0] if found else "not loaded"


def mkl_runtime() -> Any:
    """libmkl_rt loaded once, GNU threading layer, prototypes set; a CognateError (one line)
    when the ``mkl`` package is missing."""
    global _MKL
    if _MKL is not None:
        return _MKL
    path = find_mkl_rt()
    if path is None:
        raise CognateError(
            "MKL not found: `pip install mkl` (cognate's [bench] extra) or set MKL_RT to libmkl_rt"
        )
    if os.environ.get(INTEL_PATH_ENV) == "1" and not _mkl_mapped():
        load_intel_path_shim()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise CognateError(f"{path}: cannot load MKL: {exc}") from None
    lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    lib.MKL_Set_Threading_Layer(THREADING_GNU)  # before any MKL call that threads
    handle = ctypes.POINTER(ctypes.c_void_p)
    i32, ptr = ctypes.c_int32, ctypes.c_void_p
    lib.mkl_sparse_s_create_csr.argtypes = [handle, ctypes.c_int, i32, i32, ptr, ptr, ptr, ptr]
    lib.mkl_sparse_set_mm_hint.argtypes = [ptr, ctypes.c_int, MatrixDescr, ctypes.c_int, i32, i32]
    lib.mkl_sparse_optimize.argtypes = [ptr]
    lib.mkl_sparse_s_mm.argtypes = [
        *(ctypes.c_int, ctypes.c_float, ptr, MatrixDescr, ctypes.c_int),
        *(ptr, i32, i32, ctypes.c_float, ptr, i32),
    ]
    lib.mkl_sparse_destroy.argtypes = [ptr]
    lib.MKL_Set_Num_Threads.argtypes = [ctypes.c_int]
    _MKL = lib
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CognateError(f"MKL {what} failed with sparse_status {status}")


class MklSpmm:
    """A CSR matrix prepared for MKL's inspector-executor SpMM at one dense width.

    ``inspect_s``: seconds of create + set_mm_hint + optimize (a one-off, reported apart).
    ``self(B, C)`` computes C = A @ B in place (B K x width, C M x width, float32,
    C-contiguous).
    """

    def __init__(self, csr: sp.csr_matrix, width: int, threads: int | None = None) -> None:
        rows, cols = csr.shape
        if max(rows, cols, csr.nnz, width) > MAX_LP64:
            raise CognateError("MKL (LP64): matrix or width over 2^31 - 1")
        self.lib = mkl_runtime()
        if threads:
            self.lib.MKL_Set_Num_Threads(int(threads))
        # MKL keeps pointers to these arrays: they live as long as the handle.
        self.indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
        self.values = np.ascontiguousarray(csr.data, dtype=np.float32)
        self.shape, self.width = (rows, cols), int(width)
        self.descr = MatrixDescr(*DESCR_GENERAL)
        self.handle = ctypes.c_void_p()
        start = time.perf_counter()
        base = self.indptr.ctypes.data
        _check(
            self.lib.mkl_sparse_s_create_csr(
                ctypes.byref(self.handle), INDEX_BASE_ZERO, rows, cols,
                base, base + 4, self.indices.ctypes.data, self.values.ctypes.data,
            ),
            "mkl_sparse_s_create_csr",
        )  # fmt: skip
        hint = self.lib.mkl_sparse_set_mm_hint(
            self.handle, OPERATION_NON_TRANSPOSE, self.descr, LAYOUT_ROW_MAJOR,
            self.width, EXPECTED_CALLS,
        )  # fmt: skip
        _check(hint, "mkl_sparse_set_mm_hint")
        _check(self.lib.mkl_sparse_optimize(self.handle), "mkl_sparse_optimize")
        self.inspect_s = time.perf_counter() - start

    def __call__(self, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        rows, cols = self.shape
        if b.shape != (cols, self.width) or c.shape != (rows, self.width):
            raise CognateError(f"MKL SpMM: B {b.shape} / C {c.shape} do not fit A {self.shape}")
        if not (_dense_ok(b) and _dense_ok(c)):
            raise CognateError("MKL SpMM: B and C must be float32 and C-contiguous")
        status = self.lib.mkl_sparse_s_mm(
            OPERATION_NON_TRANSPOSE, 1.0, self.handle, self.descr, LAYOUT_ROW_MAJOR,
            b.ctypes.data, self.width, self.width, 0.0, c.ctypes.data, self.width,
        )  # fmt: skip
        _check(status, "mkl_sparse_s_mm")
        return c

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value:
            self.lib.mkl_sparse_destroy(handle)
            self.handle = None


def _dense_ok(a: np.ndarray) -> bool:
    return a.dtype == np.float32 and a.flags.c_contiguous and a.flags.aligned


@dataclass
class LibraryCall:
    """One prepared library reference: ``run()`` computes the product (result as the cpu
    kernels lay it out: SpMM dense C, SDDMM the values in A's CSR order)."""

    name: str
    run: Callable[[], Any]
    result: Callable[[], np.ndarray]
    inspect_s: float = 0.0


def mkl_spmm_call(csr: sp.csr_matrix, b: np.ndarray, threads: int | None = None) -> LibraryCall:
    """MKL inspector-executor C = A @ B, B read in place, C preallocated once."""
    prepared = MklSpmm(csr, b.shape[1], threads)
    c = np.empty((csr.shape[0], b.shape[1]), dtype=np.float32)
    return LibraryCall("mkl-ie", lambda: prepared(b, c), lambda: c, prepared.inspect_s)


def torch_csr(csr: sp.csr_matrix) -> Any:
    """A torch CSR tensor of ``csr`` (int32 indices, float32 values)."""
    import torch

    with warnings.catch_warnings():  # "sparse CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(np.ascontiguousarray(csr.indptr, dtype=np.int32)),
            torch.from_numpy(np.ascontiguousarray(csr.indices, dtype=np.int32)),
            torch.from_numpy(np.ascontiguousarray(csr.data, dtype=np.float32)),
            size=csr.shape,
            check_invariants=False,  # canonical CSR already (and checks cost a pass)
        )


def torch_spmm_call(csr: sp.csr_matrix, b: np.ndarray) -> LibraryCall:
    """torch.sparse.mm(A_csr, B) as a PyTorch user calls it (it allocates its output)."""
    import torch

    a, tb = torch_csr(csr), torch.from_numpy(b)
    box: list[Any] = [None]

    def run() -> None:
        box[0] = torch.sparse.mm(a, tb)

    return LibraryCall("torch.sparse.mm", run, lambda: box[0].numpy())


def torch_sddmm_call(csr: sp.csr_matrix, x: np.ndarray, y: np.ndarray) -> LibraryCall:
    """torch.sparse.sampled_addmm(A_csr, X, Y^T, beta=0) scaled by A's values (sampled_addmm
    samples at A's pattern only): A * (X @ Y^T), values in A's CSR order."""
    import torch

    a = torch_csr(csr)
    a_values = a.values()
    tx, tyt = torch.from_numpy(x), torch.from_numpy(y).T.contiguous()
    box: list[Any] = [None]

    def run() -> None:
        box[0] = torch.sparse.sampled_addmm(a, tx, tyt, beta=0.0)
        box[0].values().mul_(a_values)

    return LibraryCall("torch.sparse.sampled_addmm", run, lambda: box[0].values().numpy())


def library_makers(
    csr: sp.csr_matrix, op: str, operands: tuple[np.ndarray, ...], threads: int | None = None
) -> list[tuple[str, Callable[[], LibraryCall]]]:
    """(name, make) of each library reference of ``op``: ``make`` prepares it (inspects A)."""
    if op == "spmm":
        return [
            ("mkl-ie", lambda: mkl_spmm_call(csr, operands[0], threads)),
            ("torch.sparse.mm", lambda: torch_spmm_call(csr, operands[0])),
        ]
    return [("torch.sparse.sampled_addmm", lambda: torch_sddmm_call(csr, *operands))]


LIBRARY_ERRORS = (CognateError, ImportError, RuntimeError)  # a library that cannot run here


def library_calls(
    csr: sp.csr_matrix,
    op: str,
    operands: tuple[np.ndarray, ...],
    threads: int | None = None,
    names: Sequence[str] | None = None,
) -> tuple[list[LibraryCall], dict[str, str]]:
    """The library references of ``op`` (``names``: only these) that can run here, and why
    the others cannot."""
    calls, missing = [], {}
    for name, make in library_makers(csr, op, operands, threads):
        if names is not None and name not in names:
            continue
        try:
            calls.append(make())
        except LIBRARY_ERRORS as exc:
            missing[name] = " ".join(str(exc).split())
    return calls, missing
