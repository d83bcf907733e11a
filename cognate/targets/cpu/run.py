"""Kept only until scripts/bench_structured.py imports the pipeline: see cpu/pipeline.py."""

from cognate.targets.cpu.pipeline import prepare_kernel, run_config

__all__ = ["prepare_kernel", "run_config"]
