"""The row-clustering cache (``$COGNATE_HOME/reorder/*.npy``): a file declaring an absurd
shape, a FIFO or a link there is ignored with one warning naming it and the order is
computed again: no MemoryError, no hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate.synth import generate
from cognate.targets.cpu.row_clusters import cache_path

_CLUSTER = """
import sys
import numpy as np
from cognate.synth import generate
from cognate.targets.cpu.row_clusters import cached_cluster_rows, cluster_rows
m = generate("block", 256, 256, sparsity=0.9, block=8, seed=5, permute="rows")
got = cached_cluster_rows(m.csr, m.sha256, 0.25)
assert np.array_equal(got, cluster_rows(m.csr, 0.25))
print("ok")
"""


def _npy_declaring(rows: int) -> bytes:
    """A 128-byte .npy whose header declares ``rows`` int32 values and holds none."""
    header = f"{{'descr': '<i4', 'fortran_order': False, 'shape': ({rows},), }}"
    header += " " * (128 - 10 - len(header) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


@pytest.mark.parametrize("case", ["declares_1e12_rows", "declares_other_rows", "fifo", "link"])
def test_a_bad_order_file_is_ignored_and_recomputed(tmp_path: Path, case: str) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "COGNATE_HOME": str(home)}
    matrix = generate("block", 256, 256, sparsity=0.9, block=8, seed=5, permute="rows")
    path = Path(str(cache_path(matrix.sha256, 0.25)).replace(os.environ["COGNATE_HOME"], str(home)))
    path.parent.mkdir(parents=True)
    if case == "declares_1e12_rows":
        path.write_bytes(_npy_declaring(10**12))
    elif case == "declares_other_rows":
        path.write_bytes(_npy_declaring(300))
    elif case == "fifo":
        os.mkfifo(path)
    else:
        np.save(tmp_path / "elsewhere.npy", np.arange(256, dtype=np.int32))
        path.symlink_to(tmp_path / "elsewhere.npy")
    done = subprocess.run(
        [sys.executable, "-c", _CLUSTER], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and str(path) in lines[0], done.stderr
    assert path.is_file() and not path.is_symlink()  # replaced by the computed order
    assert np.load(path).shape == (256,)
    if case == "link":
        assert np.array_equal(np.load(tmp_path / "elsewhere.npy"), np.arange(256))
