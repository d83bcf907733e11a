"""A new target is a package plus its YAML spaces, registered; nothing else changes.

The toy target lives in a package written to a temporary folder (not under cognate/), with
its space in a YAML file beside it, and registers itself with ``register_target``. Then
``collect``, ``pretrain``, ``tune --verify --emit`` and the Python API run on it through the
CLI exactly as on the built-in targets. Its runner computes A @ B with scipy strip by strip
(checked against the reference before a runtime counts) and returns a modelled runtime, so
the records are deterministic.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cognate import targets
from cognate.cli import run as cli_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOY_PACKAGE = '''
"""A toy target: row-strip x column-strip SpMM with a modelled runtime."""
from __future__ import annotations

import hashlib
import itertools
import math
from pathlib import Path

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.runner import Measurement, Runner
from cognate.space import LoopNest, Space
from cognate.targets import Target, register_target
from cognate.util import load_yaml

HERE = Path(__file__).parent


class ToySpace(Space):
    target = "toy"

    def __init__(self, op: str) -> None:
        if op != "spmm":
            raise CognateError(f"toy has no {op} space")
        path = HERE / f"toy-{op}.yaml"
        self.op, self.name = op, f"toy-{op}"
        self.values = load_yaml(path)["knobs"]
        self.version = hashlib.sha256(path.read_bytes()).hexdigest()[:12]

    def validate(self, knobs):
        if set(knobs) != set(self.values) or any(
            knobs[k] not in v for k, v in self.values.items()
        ):
            raise CognateError(f"illegal toy config {dict(knobs)}")
        return Config(self.target, self.op, dict(knobs))

    def all_configs(self):
        names = sorted(self.values)
        return [
            self.validate(dict(zip(names, combo)))
            for combo in itertools.product(*(self.values[n] for n in names))
        ]

    def baseline(self, shape):
        return self.validate({"rows": 1, "cols": max(self.values["cols"]), "barrier": False})

    def sample(self, n, seed, shape):
        configs = self.all_configs()
        order = np.random.default_rng(seed).permutation(len(configs))[:n]
        return [configs[i] for i in order]

    def candidates(self, n, seed, shape):
        return self.all_configs()

    def loop_nest(self, config, shape, width):
        """rows -> I, cols -> K, the whole width -> J; barrier puts k1 outermost."""
        order = ("k1", "i1", "i0", "k0", "j1", "j0") if config["barrier"] else (
            "i1", "k1", "i0", "k0", "j1", "j0"
        )
        return LoopNest(
            min(config["rows"], shape[0]), min(config["cols"], shape[1]), width, order
        )

    def knob_features(self, config):
        return np.array([float(config["barrier"])], dtype=np.float32)


class ToyRunner(Runner):
    target = "toy"

    def measure_one(self, matrix, op, width, config):
        csr = matrix.csr
        b = np.random.default_rng(0).standard_normal((csr.shape[1], width)).astype(np.float32)
        step = config["rows"]
        got = np.vstack([csr[i : i + step] @ b for i in range(0, csr.shape[0], step)])
        if not np.allclose(got, csr @ b, rtol=1e-4, atol=1e-4):
            return Measurement(config, "error", error="result differs from the reference")
        # Modelled time: long rows want wide strips, per-strip overhead, a barrier cost.
        mean_row = matrix.nnz / csr.shape[0]
        fit = abs(math.log2(config["rows"]) - math.log2(max(1.0, 64 / mean_row)))
        reuse = abs(math.log2(config["cols"]) - math.log2(max(1, csr.shape[1] // 4)))
        seconds = matrix.nnz * width * 1e-9 * (1 + 0.3 * fit + 0.1 * reuse)
        seconds *= 1.25 if config["barrier"] else 1.0
        return Measurement(config, "ok", seconds, 0.0, {"modelled": True})


TARGET = register_target(
    Target("toy", ToySpace, ToyRunner, description="a toy target", exclusive=False)
)
'''

TOY_SPACE = """\
# The toy target's SpMM space: 4 x 4 x 2 = 32 configs.
knobs:
  rows: [1, 4, 16, 64]
  cols: [16, 256, 4096, 65536]
  barrier: [false, true]
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy package on sys.path (spawned collect workers inherit it), registered."""
    package = tmp_path / "plugins" / "cognate_toy_target"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY_PACKAGE))
    (package / "toy-spmm.yaml").write_text(TOY_SPACE)
    monkeypatch.syspath_prepend(str(package.parent))
    __import__("cognate_toy_target")
    yield package
    targets.unregister_target("toy")
    sys.modules.pop("cognate_toy_target", None)


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli_run(args)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_a_registered_toy_target_runs_collect_pretrain_and_tune(
    toy: Path, suitesparse_files: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrices = [str(p) for p in suitesparse_files[:8]]
    db, model = tmp_path / "toy.sqlite", tmp_path / "toy.safetensors"
    collect = ["collect", "--target", "toy", "--op", "spmm", "--width", "16", "--all-configs"]
    code, _, err = cli([*collect, "--jobs", "1", "--db", str(db), *matrices], capsys)
    assert code == 0, err

    from cognate.store import Store

    with Store(db, readonly=True) as store:
        frame = store.frame(target="toy", op="spmm")
    assert set(frame["status"]) == {"ok"} and len(frame) == 8 * 32
    assert set(frame["host"]) == {"sim"}  # not exclusive: a deterministic simulator

    pretrain = ["pretrain", "--db", str(db), "--target", "toy", "--op", "spmm"]
    code, _, err = cli([*pretrain, "--epochs", "2", "--threads", "1", "-o", str(model)], capsys)
    assert code == 0, err and model.is_file()

    emit = tmp_path / "emit"
    args = [matrices[0], "--target", "toy", "--width", "16", "--model", str(model)]
    args += ["--top-k", "3", "--verify", "--no-record", "--emit", str(emit), "--json"]
    code, out, err = cli(["tune", *args], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["target"] == "toy" and got["scored"] == 32 and len(got["candidates"]) == 3
    assert got["verified"] and all(c["status"] == "ok" for c in got["candidates"])
    assert "library" not in got  # the toy target times no library reference
    # The stored runtimes of the matrix decide: best = the fastest measured of top-3 + base.
    runtimes = frame[frame["matrix"] == got["matrix"]].set_index("config_hash")["runtime_s"]
    pool = [*got["candidates"], got["baseline"]]
    fastest = min(pool, key=lambda c: runtimes[c["hash"]])
    assert got["best"]["config"] == fastest["config"]
    assert got["best"]["runtime_s"] == pytest.approx(runtimes[fastest["hash"]])
    (emitted,) = got["emitted"]  # the default artifact: the choice as JSON
    assert json.loads(Path(emitted).read_text())["config"] == got["best"]["config"]


def test_the_api_tunes_a_toy_target_with_a_random_cost_model(
    toy: Path, suitesparse_files: list[Path], tmp_path: Path
) -> None:
    """The RandomModel floor through the same search: a saved random model loads back and
    ranks the space the same way; a callable kernel is refused in one line."""
    import cognate
    from cognate.errors import CognateError
    from cognate.model.cost_model import CostModel
    from cognate.model.random_model import RandomModel

    space = targets.get_target("toy").space("spmm")
    path = RandomModel(space, seed=7).save(tmp_path / "random.json")
    loaded = CostModel.load(path, space)
    assert isinstance(loaded, RandomModel) and loaded.seed == 7
    result = cognate.tune(suitesparse_files[0], target="toy", width=16, top_k=4, model=loaded)
    from cognate.formats.read import load_matrix

    scores = loaded.predict(load_matrix(suitesparse_files[0]), space.all_configs(), 16)
    expected = [space.all_configs()[i].hash for i in np.argsort(scores, kind="stable")[:4]]
    assert [c.config.hash for c in result.candidates] == expected
    again = cognate.tune(suitesparse_files[0], target="toy", width=16, top_k=4, model=path)
    assert [c.config.hash for c in again.candidates] == expected
    with pytest.raises(CognateError, match="toy has no callable kernel"):
        result.kernel(np.zeros((result.matrix.shape[1], 16), dtype=np.float32))
