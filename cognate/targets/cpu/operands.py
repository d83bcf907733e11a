"""Checks of the dense arrays a compiled kernel is handed: live memory and no aliasing.

A kernel reads and writes raw addresses, so two things no shape check catches end in a
crash or a silently wrong result:

- a torch tensor whose storage was freed or shrunk (``t.untyped_storage().resize_(0)``, as
  FSDP and CPU offloading do): its ``data_ptr()`` is 0 (a write there is a SIGSEGV) or its
  storage is smaller than its shape (a read past it returns whatever lies there);
- an output buffer that shares memory with an input (``kernel(B, out=B)``): SpMM zeroes and
  accumulates C while it still reads B.

The arrays handed to a kernel are C-contiguous (``tuned.as_dense`` copies any other), so
each occupies exactly ``[address, address + nbytes)``: an interval test is exact, and costs
a few comparisons (``np.shares_memory`` answers the same for contiguous arrays, slower).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np

from cognate.errors import CognateError

Extent = tuple[int, int]  # [first byte, end byte) of an array's data


SMALL_BYTES = 1 << 16  # below this, np.zeros is as cheap as a mapping


def zero_pages(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A C-contiguous zero array on fresh anonymous pages: bound placeholders and outputs
    cost nothing until written. np.zeros does not promise that: glibc serves blocks under
    its dynamic mmap threshold (which rises to 32 MiB after a large free) from the heap and
    clears them, 0.2 ms for the 6 MB operand of a mini-batch kernel, four kernels a batch."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < SMALL_BYTES:
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).reshape(shape)


def aligned_empty(shape: tuple[int, ...], dtype: Any = np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary.
    Why: a kernel streams its output (non-temporal stores, the ``stream`` knob) only into a
    vector-aligned array, and numpy's large arrays start 16 bytes past a page."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + align, dtype=np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip : skip + count * dtype.itemsize].view(dtype).reshape(shape)


def check_live_tensor(tensor: Any, what: str) -> None:
    """Raise one line when ``tensor`` (a torch tensor) has elements but no memory for them.

    Checked before anything reads it: torch's own ``clone`` / ``contiguous`` of such a tensor
    crash too. A freed storage holds 0 bytes (its ``data_ptr()`` is 0), so the size test
    covers it (its cost per call: docs/reliability.md).
    """
    numel = tensor.numel()
    if numel == 0:
        return
    if tensor.is_contiguous():
        last = tensor.storage_offset() + numel - 1
    else:
        last = tensor.storage_offset()
        for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
            last += (size - 1) * stride
    need = (last + 1) * tensor.element_size()
    held = tensor.untyped_storage().nbytes()
    if held < need:
        raise CognateError(
            f"{what}: a torch tensor of shape {tuple(tensor.shape)} whose storage holds"
            f" {held} of its {need} bytes (freed or resized, as FSDP or offloading leave"
            " parameters); give its storage memory again before the call"
        )


def tensor_extent(tensor: Any, what: str) -> Extent:
    """The byte range of a contiguous torch tensor after ``check_live_tensor``."""
    check_live_tensor(tensor, what)
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def check_disjoint(inputs: Sequence[Extent], out: Extent, op: str) -> None:
    """Raise one line when ``out`` shares a byte with any of ``inputs`` (empty ranges
    share nothing)."""
    lo, hi = out
    if lo == hi:
        return
    for index, (start, end) in enumerate(inputs):
        if start < hi and lo < end and start != end:
            raise overlap_error(op, index)


def overlap_error(op: str, index: int) -> CognateError:
    return CognateError(
        f"cpu {op}: out shares memory with dense operand {index}; the kernel writes out while"
        " it reads its operands (pass a separate out, or out=None)"
    )
