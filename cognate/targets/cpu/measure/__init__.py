"""Measurement of cpu kernels: the isolated runner and its worker (runner.py, worker.py), the
scipy reference every result is checked against (check.py), ``tune --verify``'s interleaved
job (verify.py, interleave.py) and the library references it times (library.py)."""
