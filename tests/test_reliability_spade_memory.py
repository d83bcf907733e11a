"""The spade simulator's memory is priced with the width: its row region holds 5 bytes per row
per 64-byte line of a row of C, so a wide run on a tall matrix is refused before it starts."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from cognate.targets.spade import simulation_cost

_MEASURE = """
import resource, sys
import numpy as np, scipy.sparse as sp
from cognate.config import Config
from cognate.matrix import Matrix, canonicalize
from cognate.targets import get_target
rows, width = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
a = sp.coo_matrix((np.ones(10), (rng.integers(0, rows, 10), rng.integers(0, rows, 10))),
                  shape=(rows, rows))
target = get_target("spade-calibrated")
runner = target.make_runner()
tiny = Matrix("tiny", canonicalize(sp.eye(8, format="csr")))
config = target.space("spmm").baseline((rows, rows))
runner.begin_batch(tiny, "spmm", 4)
assert runner.measure_one(tiny, "spmm", 4, config).status == "ok"  # the library loaded
matrix = Matrix("tall", canonicalize(a))
runner.begin_batch(matrix, "spmm", width)  # tilings are per matrix
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
m = runner.measure_one(matrix, "spmm", width, config)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(m.status, after - before, matrix.nnz)
"""


def test_the_price_covers_what_a_wide_simulation_holds() -> None:
    rows, width = 200_000, 4096  # a row region of 256 MB (before: priced at 10 MB in all)
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(rows), str(width)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    status, grown, nnz = proc.stdout.split()
    assert status == "ok"
    priced = simulation_cost(width).bytes(rows, rows, int(nnz))
    # (no lower bound: the peak RSS a child reports before the simulation varied between
    # runs of the whole suite, so its growth read 0-100% of the region)
    assert int(grown) <= priced, (int(grown) / 2**20, priced / 2**20)


def _limit_memory() -> None:  # were the price wrong, the child fails, not the host
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_a_wide_verify_on_a_tall_matrix_is_refused_up_front(tmp_path: Path) -> None:
    """The issue's case: 10^7 x 10^7 with 10 entries at width 4096 (10.5 GB peak, priced at
    0.7 GB) is one line under an 8 GiB budget, before anything is simulated."""
    mtx = tmp_path / "tall.mtx"
    entries = "".join(f"{1 + 999_983 * i % 10**7} {1 + 7 * i} 1.0\n" for i in range(10))
    mtx.write_text(f"%%MatrixMarket matrix coordinate real general\n{10**7} {10**7} 10\n{entries}")
    proc = subprocess.run(
        [sys.executable, "-m", "cognate", "tune", str(mtx), "--target", "spade-calibrated",
         "--verify", "--no-record", "--width", "4096"],
        capture_output=True, text=True, timeout=300, preexec_fn=_limit_memory,
        env={**os.environ, "COGNATE_MAX_MEMORY": "8G"},
    )  # fmt: skip
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert str(mtx) in err[0] and "over the memory budget" in err[0], err


_OUT_OF_MEMORY = _MEASURE.replace(
    "before = resource",
    "import os\n"
    "size = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
    "cap = size + (1 << 30)  # the address space now and 1 GiB: no room for the region\n"
    "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
    "before = resource",
).replace("print(m.status, after - before, matrix.nnz)", "print(m.status, m.error)")


def test_out_of_memory_in_the_simulator_is_a_failed_run_saying_so() -> None:
    """A run the C code cannot allocate for (a 1e6-row region of 1.3 GB with a tight address
    space) is status error naming the memory, never a runtime."""
    proc = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY, str(1_000_000), str(4096)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("error spade simulator: out of memory simulating a 1000000 x")


def test_collect_prices_every_pool_worker(tmp_path: Path) -> None:
    """collect --jobs N runs N simulations at once, each with its own matrix and row region:
    priced N times, so a width that fits one simulation but not four is refused up front."""
    import numpy as np
    import scipy.sparse as sp

    from cognate.formats.write import save_matrix
    from cognate.matrix import Matrix, canonicalize

    rows, width = 100_000, 256
    rng = np.random.default_rng(0)
    a = sp.coo_matrix(
        (np.ones(10), (rng.integers(0, rows, 10), rng.integers(0, rows, 10))), shape=(rows, rows)
    )
    path = tmp_path / "tall.npz"
    save_matrix(Matrix("tall", canonicalize(a)), path)
    one = simulation_cost(width).bytes(rows, rows, 10)
    env = {**os.environ, "COGNATE_MAX_MEMORY": str(int(2.5 * one)), "COGNATE_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "cognate", "collect", "--target", "spade", "--op", "spmm"]
    argv += ["--width", str(width), "--configs", "1", "--db", str(tmp_path / "r.sqlite")]
    four = subprocess.run([*argv, "--jobs", "4", str(path)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert four.returncode == 1 and "--jobs 4" in four.stderr, four.stderr
    assert "Traceback" not in four.stderr
    two = subprocess.run([*argv, "--jobs", "2", str(path)], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert two.returncode == 0, two.stderr
