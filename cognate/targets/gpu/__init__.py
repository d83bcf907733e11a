"""The gpu target: Triton SpMM / SDDMM kernels whose knobs are the schedule, timed on CUDA.

Importing this package needs neither triton nor a GPU: the spaces are plain YAML, and
the runner loads the kernels (and checks for CUDA) when it is constructed.
"""

from __future__ import annotations

from typing import Any

from cognate.runner import Runner
from cognate.targets import Target
from cognate.targets.gpu.space import GpuSpace


def cuda_missing() -> str | None:
    """Why this machine cannot run the gpu target (no CUDA GPU), or None when it can.
    Said before anything else about the gpu target, since every other error follows."""
    import torch

    if torch.cuda.is_available():
        return None
    return "no CUDA GPU on this machine (torch.cuda.is_available() is False)"


def make_runner(**options: Any) -> Runner:
    from cognate.targets.gpu.runner import GpuRunner  # imports torch and triton

    return GpuRunner(**options)


TARGET = Target(
    name="gpu",
    make_space=GpuSpace,
    make_runner=make_runner,
    description="Triton SpMM/SDDMM kernels on a CUDA GPU (cuSPARSE as the library reference)",
    exclusive=True,
    missing=cuda_missing,
)
