"""Load the Triton kernel module kernels/gpu/triton_spmm.py (it lives outside the package).

Triton is imported only here, on first use, so the gpu space (and ``cognate --help``)
works without it. ``TRITON_INTERPRET=1`` must be set before the first load to run the
kernels on CPU tensors.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from types import ModuleType

from cognate.errors import CognateError
from cognate.paths import kernels_dir

MODULE_NAME = "cognate_gpu_triton_kernels"


@lru_cache(maxsize=1)
def load_kernels() -> ModuleType:
    """The kernel module, imported once per process."""
    try:
        import triton  # noqa: F401
    except ImportError:
        raise CognateError(
            "gpu target: triton is not installed (pip install 'cognate[gpu]')"
        ) from None
    path = kernels_dir() / "gpu" / "triton_spmm.py"
    if not path.is_file():
        raise CognateError(f"{path}: gpu kernel source not found")
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses look their module up while defining
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    return module
