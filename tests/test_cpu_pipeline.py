"""One cpu kernel pipeline: collect's worker, tune --verify and result.kernel pack, build and
bind through cognate.targets.cpu.pipeline and run the same argument-vector call."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cognate
from cognate.formats.read import load_matrix
from cognate.targets.cpu import pipeline
from cognate.targets.cpu.measure import interleave, worker
from cognate.targets.cpu.measure.check import OPERAND_SEED, dense_operands, reference_for
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.tuned import ScheduleKernel

PACKAGE = Path(cognate.__file__).parent


@pytest.fixture(scope="module")
def matrix(shared: Path):
    return load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")


@pytest.fixture()
def prepared(monkeypatch) -> list[pipeline.PreparedKernel]:
    """Every PreparedKernel made while the test runs, each counting the calls of its run."""
    made: list[pipeline.PreparedKernel] = []
    init = pipeline.PreparedKernel.__init__

    def counting_init(self, bound) -> None:
        init(self, bound)
        run, self.calls = self.run, 0

        def counted() -> None:
            self.calls += 1
            run()

        self.run = counted
        made.append(self)

    monkeypatch.setattr(pipeline.PreparedKernel, "__init__", counting_init)
    return made


def test_only_the_pipeline_packs_builds_and_binds() -> None:
    """No module but pipeline.py calls a family's pack / build / bind or makes an
    argument-vector call of a bound kernel."""
    step = re.compile(r"families\.(pack|build|bind|prepare)\(|\.argv_call\(\)")
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if step.search(path.read_text())
    ]
    assert found == ["targets/cpu/pipeline.py"]


def test_the_worker_times_the_pipeline_call(matrix, prepared) -> None:
    base = make_space("spmm").baseline(matrix.shape)
    csr = matrix.csr
    state = worker._MatrixState(csr.indptr, csr.indices, csr.data, csr.shape, "spmm", 16)
    sent: list[tuple] = []

    class Conn:
        def send(self, message: tuple) -> None:
            sent.append(message)

    job = {
        "knobs": dict(base.knobs), "lib_path": str(pipeline.build("spmm", base.knobs, 16)),
        "warmup": 1, "repeats": 3, "min_sample_s": 0.0, "timeout_s": 10.0,
    }  # fmt: skip
    worker._run_job(Conn(), state, job)
    assert sent[-1][0] == "timed", sent
    counters = sent[-1][4]
    (kernel,) = prepared
    # the checked run, the warm-ups and the samples: every one through the pipeline's call
    expected = 1 + (counters["warmup"] + counters["repeats"]) * counters["number"]
    assert kernel.calls == expected


def test_verify_and_the_user_kernel_run_the_pipeline_call(matrix, prepared) -> None:
    base = make_space("spmm").baseline(matrix.shape)
    operands = dense_operands("spmm", matrix.shape, 16, OPERAND_SEED)
    ref = reference_for(matrix.csr, "spmm", operands)
    job = {"op": "spmm", "width": 16}
    call, outcome, _ = interleave._prepare_config(
        job, pipeline.pack_source(matrix), operands, ref, dict(base.knobs)
    )
    assert outcome == {"status": "ok"} and isinstance(call, pipeline.PreparedKernel)
    before = call.calls
    call()  # what verify's timing loops call
    assert call.calls == before + 1

    kernel = ScheduleKernel(matrix, "spmm", base)
    out = np.empty((matrix.shape[0], 16), np.float32)
    kernel(operands[0], out=out)
    kernel(operands[0], out=out)  # the repeat path
    user = prepared[-1]
    assert user is not call and user.calls == 2
    assert ref.check(out) is None
