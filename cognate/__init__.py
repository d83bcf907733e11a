"""cognate: a cost-model-driven autotuner for sparse tensor programs (SpMM / SDDMM)."""

__version__ = "0.1.0"
