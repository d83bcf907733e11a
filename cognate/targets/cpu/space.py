"""The cpu schedule space: WACO's SuperSchedule for SpMM and SDDMM (configs/cpu-<op>.yaml).

A config's knobs are exactly ``isplit, ksplit, jsplit`` (inner extents of the split loops,
powers of two), ``order`` (the six loops, outermost first), ``formats`` (U/C for A's four
levels in the fixed variable order, e.g. i1 i0 k1 k0 for SpMM) and ``chunk`` (the OpenMP
dynamic chunk). The YAML holds the value sets and rule parameters; this module applies them.
``validate`` is the only way a config reaches the kernel generator, so it rejects anything
that is not exactly a legal config (wrong types, bools posing as ints, unknown keys, ...).

Configs with a ``family`` knob (DIA, reordered BCSR) are the other kernel families
(family_space.py); without one a config is WACO's CSR family, with the knobs and hash it had
in the csr-only space versions.

The sampler follows WACO's training-data recipe (its SuperSchedule_Generator scripts and the
peer data in shared/peers/waco): a third from a block-CSR family, the rest random legal
orders and formats. It is vectorised with numpy so that the tens of thousands of distinct
candidates a search draws cost little next to the featurizer.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from functools import cache, cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from cognate.config import Config
from cognate.errors import CognateError
from cognate.space import LoopNest, Space, load_space_spec, space_file
from cognate.targets.cpu.codegen import (
    DEFAULT_VECTOR,
    PLAIN_CSR_ORDER,
    PRECISION_KNOBS,
    SCHEDULE_KNOBS,
    STORE_KNOBS,
    VECTOR_KNOBS,
    Schedule,
    VectorTile,
)
from cognate.targets.cpu.families import CSR
from cognate.targets.cpu.family_space import Families, FamilySpec, KernelFamily
from cognate.targets.cpu.isa import host_isa

OPS: tuple[str, ...] = ("spmm", "sddmm")
KNOBS: tuple[str, ...] = ("isplit", "ksplit", "jsplit", "order", "formats", "chunk")
FORMAT_NAMES: tuple[str, str] = ("U", "C")  # index 1 = compressed: a set bit in a format code
TARGET = "cpu"
# The kernel variants a sample and the search set hold (``CpuSpace.kernel_variants``): register
# tiles of 2-8 vectors, two unrolls; the row schedules one at a time.
VARIANT_VREGS: tuple[int, ...] = (2, 4, 8)
VARIANT_UNROLLS: tuple[int, ...] = (2, 4)
VARIANT_SCHEDULES: tuple[Schedule, ...] = (  # the most frequent winners first
    Schedule(batch=256),
    Schedule(nzsplit=1),
    Schedule(threads=1),
    Schedule(batch=64),
    Schedule(prefetch=4),
    Schedule(batch=16),
    Schedule(prefetch=16),
)


# --- the YAML schema (pydantic gives a clear error for a malformed space file) ---------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Rules(_Strict):
    before: list[tuple[str, str]]
    dense_pair_innermost_below: int
    exempt_orders: list[list[str]]
    forbid_all_uncompressed: bool


class _Block(_Strict):
    orders: list[list[str]]
    sparse_split_max_log2: int
    formats: list[list[Literal["U", "C"]]]


class _Sampler(_Strict):
    block_denominator: int
    block: _Block
    chunk_max_log2: int


class _SpaceFile(_Strict):
    target: Literal["cpu"]
    op: Literal["spmm", "sddmm"]
    loops: list[str]
    sparse_vars: tuple[str, str]
    dense_var: str
    splits: dict[str, tuple[str, int]]
    chunk_max_log2: int
    rules: _Rules
    baseline: dict[str, Any]
    sampler: _Sampler
    compatible_versions: list[str] = []
    families: dict[str, FamilySpec] = {}


def _short(value: Any) -> str:
    """A value for an error message, kept short so the message stays one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cap_log2(dim: int) -> int:
    """WACO's sampling cap for a split of a dimension: 2^(floor(log2 dim) - 1), at least 2^0."""
    return max(0, int(dim).bit_length() - 2)


def parallel_loop(order: Sequence[str]) -> str:
    """The loop that is OpenMP-parallel: the outermost of i1 and j1 (WACO's rule).

    SpMM requires j1 after i1, so it is always i1 there; SDDMM may put j1 first.
    """
    return "i1" if list(order).index("i1") < list(order).index("j1") else "j1"


class CsrFamily:
    """WACO's SuperSchedule as one kernel family of the cpu space (see ``KernelFamily``)."""

    name = CSR

    def __init__(self, space: CpuSpace) -> None:
        self.space = space

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        return self.space.validate_csr(knobs)

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None:
        self.space.check_csr_shape(config, shape)

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        return self.space.csr_loop_nest(config)

    def describe(self, config: Config) -> str:
        return self.space.describe_csr(config)


class CpuSpace(Space):
    """WACO's SuperSchedule for one op, read from ``configs/cpu-<op>.yaml``."""

    def __init__(self, op: str) -> None:
        if op not in OPS:
            raise CognateError(
                f"unknown op {op!r} for target cpu; expected one of {', '.join(OPS)}"
            )
        self.target, self.op, self.name = TARGET, op, f"cpu-{op}"
        spec, self.version = load_space_spec(self.name, _SpaceFile)
        self._spec = spec
        self.loops: tuple[str, ...] = tuple(spec.loops)
        self.sparse_vars: tuple[str, str] = spec.sparse_vars
        self.dense_var: str = spec.dense_var
        self.split_knob: dict[str, str] = {var: knob for knob, (var, _) in spec.splits.items()}
        self.split_max_log2: dict[str, int] = {k: m for k, (_, m) in spec.splits.items()}
        s1, s2 = self.sparse_vars
        self.levels: tuple[str, ...] = (f"{s1}1", f"{s1}0", f"{s2}1", f"{s2}0")
        self._check_spec()
        self._all_orders: list[tuple[str, ...]] = list(itertools.permutations(self.loops))
        self._order_index = {o: n for n, o in enumerate(self._all_orders)}
        self._exempt = {tuple(o) for o in spec.rules.exempt_orders}
        self.families = Families(op, spec.families, str(space_file(self.name)))
        # One interface per kernel family (validate, check_shape, loop_nest, describe):
        # WACO's CSR space here, DIA and BCSR in family_space.py.
        self._kernel_families: dict[str, KernelFamily] = {
            CSR: CsrFamily(self),
            **{name: self.families.family(name) for name in self.families.specs},
        }
        self._baseline = self.validate(spec.baseline)
        self._generator_orders = self._filter_orders()
        self.compatible_versions: tuple[str, ...] = tuple(spec.compatible_versions)

    def accepts_version(self, version: str) -> bool:
        """Current, or a listed earlier version whose records are this space's csr family."""
        return version == self.version or version in self.compatible_versions

    def _check_spec(self) -> None:
        """The YAML must name the same variables as the fixed knob set (a typo is caught here)."""
        spec = self._spec
        variables = {v[0] for v in self.loops}
        ok = (
            set(spec.splits) == {"isplit", "jsplit", "ksplit"}
            and {var for var, _ in spec.splits.values()} == variables == {"i", "j", "k"}
            and sorted(self.loops) == sorted(f"{v}{n}" for v in variables for n in "01")
            and self.dense_var not in self.sparse_vars
            and spec.op == self.op
        )
        if not ok:
            raise CognateError(f"{space_file(self.name)}: loops, splits and variables disagree")

    # --- validation -------------------------------------------------------------------------

    def _error(self, problem: str) -> CognateError:
        return CognateError(f"cpu {self.op} config: {problem}")

    def _power_of_two(self, knob: str, value: Any, max_log2: int) -> int:
        # bool is an int subclass: True would pass as 1 without this check.
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise self._error(f"{knob} must be an integer, got {_short(value)}")
        value = int(value)
        if value < 1 or value & (value - 1):
            raise self._error(f"{knob}={value} is not a power of two >= 1")
        if value > 1 << max_log2:
            raise self._error(f"{knob}={value} exceeds its maximum 2^{max_log2} = {1 << max_log2}")
        return value

    def _names(self, knob: str, value: Any, length: int, allowed: Sequence[str]) -> list[str]:
        if not isinstance(value, list | tuple):
            raise self._error(f"{knob} must be a list of {length} names, got {_short(value)}")
        if len(value) != length or not all(isinstance(v, str) and v in allowed for v in value):
            raise self._error(
                f"{knob} must be {length} of {' '.join(allowed)}, got {_short(list(value))}"
            )
        return list(value)

    def order_problem(
        self, order: Sequence[str], dense_split: int, exempt: bool = True
    ) -> str | None:
        """Which legality rule ``order`` breaks with this dense split, or None if legal.

        ``exempt=False`` applies WACO's generator filter alone (no block-order exemption).
        """
        pos = {loop: n for n, loop in enumerate(order)}
        for var in sorted({loop[0] for loop in self.loops}):
            if pos[f"{var}1"] > pos[f"{var}0"]:
                return f"{var}1 must come before {var}0"
        for first, second in self._spec.rules.before:
            if pos[first] > pos[second]:
                return f"{second} must come after {first}"
        d1, d0 = f"{self.dense_var}1", f"{self.dense_var}0"
        if order[-1] != d0:
            return f"{d0} must be the innermost loop"
        below = self._spec.rules.dense_pair_innermost_below
        exempted = exempt and tuple(order) in self._exempt
        if dense_split < below and order[-2] != d1 and not exempted:
            knob = self.split_knob[self.dense_var]
            return f"{d1} {d0} must be the two innermost loops when {knob} < {below}"
        return None

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        """The canonical Config for ``knobs``; CognateError naming the broken rule otherwise.

        A csr-family config has no ``family`` knob (``family: csr`` is dropped), so its
        canonical knobs and hash are those of the csr-only space versions.
        """
        if not isinstance(knobs, Mapping):
            raise self._error(f"knobs must be a mapping, got {type(knobs).__name__}")
        return self.kernel_family(knobs).validate(knobs)

    def kernel_family(self, knobs: Mapping[str, Any]) -> KernelFamily:
        """The kernel family a config's knobs belong to (``family`` knob, csr when absent)."""
        name = knobs.get("family", CSR)
        family = self._kernel_families.get(name) if isinstance(name, str) else None
        if family is None:
            raise CognateError(
                f"cpu {self.op} config: family={str(name)[:40]!r} is not one of"
                f" {', '.join(self._kernel_families)}"
            )
        return family

    def validate_csr(self, knobs: Mapping[str, Any]) -> Config:
        """The WACO CSR family's validation (``family: csr`` dropped, see ``validate``)."""
        knobs = {k: v for k, v in knobs.items() if k != "family"}
        vector = {k: knobs.pop(k) for k in list(knobs) if k in VECTOR_KNOBS}
        schedule = {k: knobs.pop(k) for k in list(knobs) if k in SCHEDULE_KNOBS}
        store = {k: knobs.pop(k) for k in list(knobs) if k in STORE_KNOBS}
        precision = {k: knobs.pop(k) for k in list(knobs) if k in PRECISION_KNOBS}
        unknown = sorted(str(k) for k in knobs if k not in KNOBS)
        if unknown:
            raise self._error(f"unknown knob(s) {', '.join(unknown)}; expected {', '.join(KNOBS)}")
        missing = [k for k in KNOBS if k not in knobs]
        if missing:
            raise self._error(f"missing knob(s) {', '.join(missing)}")
        clean: dict[str, Any] = {
            knob: self._power_of_two(knob, knobs[knob], self.split_max_log2[knob])
            for knob in ("isplit", "jsplit", "ksplit")
        }
        clean["chunk"] = self._power_of_two("chunk", knobs["chunk"], self._spec.chunk_max_log2)
        order = self._names("order", knobs["order"], 6, self.loops)
        if len(set(order)) != 6:
            raise self._error(f"order must be a permutation of {' '.join(self.loops)}, got {order}")
        problem = self.order_problem(order, clean[self.split_knob[self.dense_var]])
        if problem:
            raise self._error(f"order {' '.join(order)}: {problem}")
        clean["order"] = order
        formats = self._names("formats", knobs["formats"], 4, FORMAT_NAMES)
        if self._spec.rules.forbid_all_uncompressed and formats == ["U"] * 4:
            raise self._error(f"formats U U U U (A fully dense) are not in the {self.op} space")
        clean["formats"] = formats
        if vector:
            clean.update(self._vector_knobs(clean, vector))
        if schedule:
            clean.update(self._schedule_knobs(clean, schedule))
        if store:
            clean.update(self._knob_group(clean, store, STORE_KNOBS, "store"))
        if precision:
            clean.update(self._knob_group(clean, precision, PRECISION_KNOBS, "precision"))
        return Config(TARGET, self.op, clean)

    def _plain_csr_spmm(self, clean: Mapping[str, Any]) -> bool:
        return (
            self.op == "spmm"
            and tuple(clean["order"]) == PLAIN_CSR_ORDER
            and clean["isplit"] == 1
            and clean["ksplit"] == 1
            and clean["formats"][0] == "U"
            and clean["formats"][1] == "U"
            and clean["formats"][2] == "C"
            and clean["formats"][3] == "U"
        )

    def _schedule_knobs(self, clean: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, int]:
        """The plain CSR SpMM kernel's schedule knobs (codegen.SCHEDULE_KNOBS), all or none."""
        out = self._knob_group(clean, given, SCHEDULE_KNOBS, "schedule")
        problem = Schedule(**out).problem()
        if problem:
            raise self._error(problem)
        return out

    def _vector_knobs(self, clean: Mapping[str, Any], vector: Mapping[str, Any]) -> dict[str, int]:
        """The plain CSR SpMM kernel's vector knobs (codegen.VECTOR_KNOBS), all three or none.
        Any whitelisted width is accepted here, so records of another host stay readable; a
        width this host lacks is refused where its kernel is generated (isa.py)."""
        return self._knob_group(clean, vector, VECTOR_KNOBS, "vector")

    def _knob_group(
        self,
        clean: Mapping[str, Any],
        given: Mapping[str, Any],
        group: Mapping[str, tuple[int, ...]],
        what: str,
    ) -> dict[str, int]:
        """A group of the plain CSR SpMM kernel's integer knobs: all or none, whitelisted."""
        if len(given) != len(group):
            raise self._error(f"{what} knobs come together: {', '.join(group)}")
        out = {}
        for knob, legal in group.items():
            value = given[knob]
            if isinstance(value, bool) or not isinstance(value, int) or value not in legal:
                raise self._error(f"{knob} must be one of {legal}, got {_short(value)}")
            out[knob] = int(value)
        if not self._plain_csr_spmm(clean):
            raise self._error(f"{what} knobs apply to the plain CSR SpMM kernel only")
        return out

    def dims(self, shape: tuple[int, int], width: int | None = None) -> dict[str, int]:
        """Extent of each loop variable for a matrix of ``shape`` (the dense one needs width)."""
        s1, s2 = self.sparse_vars
        dims = {s1: int(shape[0]), s2: int(shape[1])}
        if width is not None:
            dims[self.dense_var] = int(width)
        return dims

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None:
        """Reject sparse splits beyond the dimension they split.

        A split at least the whole dimension (the smallest power of two covering it) gives the
        same loop nest as any larger one, only with more padding, so larger ones are refused.
        """
        self.kernel_family(config.knobs).check_shape(config, shape)

    def check_csr_shape(self, config: Config, shape: tuple[int, int]) -> None:
        for var, dim in self.dims(shape).items():
            knob = self.split_knob[var]
            cap = 1 << max(0, (dim - 1).bit_length())
            if config[knob] > cap:
                raise self._error(
                    f"{knob}={config[knob]} exceeds {cap}, the dimension {dim} of {var}"
                )

    # --- the fixed parts ----------------------------------------------------------------------

    def baseline(self, shape: tuple[int, int]) -> Config:
        """WACO's FixedCSR (rows parallel, CSR, chunk 32); the same for every shape."""
        return self._baseline

    def legal_orders(self, dense_split: int) -> list[tuple[str, ...]]:
        """Every legal loop order for this dense split (exempt block orders included)."""
        return [o for o in self._all_orders if self.order_problem(o, dense_split) is None]

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        """Identity: the cpu knobs are the loop vocabulary (SDDMM keeps its i, j, k names);
        the DIA / BCSR families' loops in family_space.py."""
        return self.kernel_family(config.knobs).loop_nest(config, shape, width)

    def csr_loop_nest(self, config: Config) -> LoopNest:
        return LoopNest(
            i_split=config["isplit"],
            k_split=config["ksplit"],
            j_split=config["jsplit"],
            order=tuple(config["order"]),
        )

    def knob_features(self, config: Config) -> np.ndarray:
        """[4 bits: level compressed (i1 i0 x1 x0 order), log2(chunk) / its maximum] for a
        csr config (zeros otherwise), then the family one-hot and the family knobs."""
        csr = np.zeros(5, dtype=np.float32)
        if "family" not in config.knobs:
            bits = [1.0 if f == "C" else 0.0 for f in config["formats"]]
            chunk = (int(config["chunk"]).bit_length() - 1) / self._spec.chunk_max_log2
            csr[:] = [*bits, chunk]
        return np.concatenate([csr, self.families.features(config)])

    def kernel_knob_features(self, config: Config) -> np.ndarray:
        """SpMM: the kernel's vector tile and row schedule as the kernel runs them, a config
        without the knobs at their defaults (codegen.DEFAULT_VECTOR, the default schedule):
        [log2 vbits - 8, log2 vregs / 3, log2 unroll / 2, one thread, log2(1 + prefetch) / 4,
        log2(1 + batch) / 8, nzsplit]. SDDMM: none (its kernels have no such knobs).
        C's streaming stores (``stream``) and B's precision (``bf16``) are not encoded: the
        shipped models' inputs predate the knobs, so such a kernel ranks as its plain twin and
        only verify's timing chooses it (vector.py; bf16 only when asked)."""
        if self.op != "spmm":
            return np.zeros(0, dtype=np.float32)
        knobs = config.knobs
        tile = DEFAULT_VECTOR.knobs | {k: knobs[k] for k in VECTOR_KNOBS if k in knobs}
        sched = Schedule().knobs | {k: knobs[k] for k in SCHEDULE_KNOBS if k in knobs}
        return np.array(
            [
                np.log2(tile["vbits"]) - 8,
                np.log2(tile["vregs"]) / 3,
                np.log2(tile["unroll"]) / 2,
                float(sched["threads"] == 1),
                np.log2(1 + sched["prefetch"]) / 4,
                np.log2(1 + sched["batch"]) / 8,
                float(sched["nzsplit"]),
            ],
            dtype=np.float32,
        )

    def family(self, config: Config) -> str:
        """csr (no ``family`` knob), dia, bcsr, reordered or panel."""
        return self.kernel_family(config.knobs).name

    def describe(self, config: Config) -> str:
        """The config in one line, in its family's words."""
        return self.kernel_family(config.knobs).describe(config)

    def describe_csr(self, config: Config) -> str:
        """WACO-like one line: splits, order, A's levels in storage order, parallel loop."""
        order = list(config["order"])
        fmt = dict(zip(self.levels, config["formats"], strict=True))
        storage = " ".join(f"{lvl}:{fmt[lvl]}" for lvl in order if lvl in fmt)
        variables = (*self.sparse_vars, self.dense_var)  # WACO's order: sparse, then dense
        splits = " ".join(f"{self.split_knob[v]}={config[self.split_knob[v]]}" for v in variables)
        vector = ""
        if "vbits" in config.knobs:
            tile = VectorTile(config["vbits"], config["vregs"], config["unroll"])
            vector = f" | {tile.words()}"
        if "nzsplit" in config.knobs:
            schedule = Schedule(**{k: config[k] for k in SCHEDULE_KNOBS})
            vector += f" | {schedule.words()}"
        if config.knobs.get("stream"):
            vector += " | C streamed"
        if config.knobs.get("bf16"):
            vector += " | B as bf16"
        return (
            f"{self.op} {splits} order {' '.join(order)} | A {storage} | "
            f"omp {parallel_loop(order)} dynamic,{config['chunk']}{vector}"
        )

    # --- sampling (vectorised: rows of codes, one per config) ---------------------------------
    # A config is coded as 6 small ints: log2 isplit, log2 jsplit, log2 ksplit, order index,
    # format code (bit 3 - l set = level l compressed), log2 chunk; one int64 key per row
    # makes de-duplication a numpy operation.

    _SPLITS = ("isplit", "jsplit", "ksplit")

    def _split_highs(self, shape: tuple[int, int], sparse_max: int) -> list[int]:
        dims = self.dims(shape)
        highs = []
        for knob in self._SPLITS:
            var = next(v for v, k in self.split_knob.items() if k == knob)
            top = self.split_max_log2[knob]
            highs.append(
                top if var == self.dense_var else min(top, sparse_max, _cap_log2(dims[var]))
            )
        return highs

    def _format_codes(self, choices: Sequence[Sequence[str]]) -> np.ndarray:
        codes = []
        for combo in itertools.product(*choices):
            if self._spec.rules.forbid_all_uncompressed and all(f == "U" for f in combo):
                continue
            codes.append(sum(1 << (3 - n) for n, f in enumerate(combo) if f == "C"))
        return np.asarray(codes, dtype=np.int64)

    def _filter_orders(self) -> tuple[np.ndarray, np.ndarray]:
        """Order indices WACO's random phase draws from (its filter, without the exemption),
        for dense splits below and at/above the dense-pair threshold."""
        below = self._spec.rules.dense_pair_innermost_below
        small, large = (
            np.asarray(
                [
                    idx
                    for idx, order in enumerate(self._all_orders)
                    if self.order_problem(order, split, exempt=False) is None
                ]
            )
            for split in (below - 1, below)
        )
        return small, large

    def _draw_rows(
        self, rng: np.random.Generator, count: int, shape: tuple[int, int], block: bool
    ) -> np.ndarray:
        sampler = self._spec.sampler
        sparse_max = sampler.block.sparse_split_max_log2 if block else 99
        highs = self._split_highs(shape, sparse_max)
        lg = [rng.integers(0, high + 1, size=count) for high in highs]
        dense_lg = lg[self._SPLITS.index(self.split_knob[self.dense_var])]
        if block:
            pool = np.asarray([self._order_index[tuple(o)] for o in sampler.block.orders])
            order = pool[rng.integers(0, len(pool), size=count)]
            fmt_pool = self._format_codes(sampler.block.formats)
        else:
            small, large = self._generator_orders
            is_small = (1 << dense_lg) < self._spec.rules.dense_pair_innermost_below
            u = rng.random(count)
            order = np.where(
                is_small, small[(u * len(small)).astype(int)], large[(u * len(large)).astype(int)]
            )
            fmt_pool = self._format_codes([FORMAT_NAMES] * 4)
        fmt = fmt_pool[rng.integers(0, len(fmt_pool), size=count)]
        chunk = rng.integers(0, sampler.chunk_max_log2 + 1, size=count)
        return np.stack([*lg, order, fmt, chunk], axis=1).astype(np.int64)

    @staticmethod
    def _keys(rows: np.ndarray) -> np.ndarray:
        radix = np.asarray([1 << 28, 1 << 23, 1 << 18, 1 << 8, 1 << 4, 1], dtype=np.int64)
        return rows @ radix

    def _fill(
        self,
        rng: np.random.Generator,
        need: int,
        shape: tuple[int, int],
        block: bool,
        seen: set[int],
    ) -> list[np.ndarray]:
        """Draw until ``need`` new distinct rows, or until the family looks exhausted (a round
        that finds nothing new): a space smaller than ``need`` is not an error."""
        taken: list[np.ndarray] = []
        for _ in range(30):
            if need <= 0:
                break
            rows = self._draw_rows(rng, max(2 * need + 64, 2048), shape, block)
            keys = self._keys(rows)
            _, first = np.unique(keys, return_index=True)
            first.sort()  # keep draw order: the result must not depend on key values
            fresh = [i for i in first.tolist() if int(keys[i]) not in seen][:need]
            if not fresh:
                break
            seen.update(int(keys[i]) for i in fresh)
            taken.append(rows[fresh])
            need -= len(fresh)
        return taken

    def _decode(self, rows: np.ndarray) -> list[Config]:
        orders = self._all_orders
        fmt_names = [[FORMAT_NAMES[(code >> (3 - n)) & 1] for n in range(4)] for code in range(16)]
        out = []
        for li, lj, lk, oi, fc, lc in rows.tolist():
            knobs = {
                "isplit": 1 << li,
                "jsplit": 1 << lj,
                "ksplit": 1 << lk,
                "order": list(orders[oi]),
                "formats": list(fmt_names[fc]),
                "chunk": 1 << lc,
            }
            out.append(Config(TARGET, self.op, knobs))
        return out

    def sample(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """WACO's recipe: n // 3 distinct block-CSR configs, then random legal ones, distinct;
        then the DIA and BCSR configs of the YAML's ``sample`` grids legal for ``shape``.

        Deterministic per (seed, shape); the csr part (the first ``n``) is the draw of the
        csr-only space versions, so collecting again measures only the family configs.
        Fewer than ``n`` csr configs only if that space for this shape is smaller than ``n``.
        """
        return (
            self.sample_csr(n, seed, shape)
            + self.families.grid(shape, sampled=True)
            + self.kernel_variants()
        )

    def kernel_variants(self) -> list[Config]:
        """The baseline's plain CSR SpMM kernel at this host's vector tiles and under each
        row schedule (codegen.VECTOR_KNOBS, SCHEDULE_KNOBS): one knob group changed at a time,
        so records say what each knob is worth; none for SDDMM, whose kernel has no such knobs.
        Vector widths from 256 bits up that this host has (128-bit vectors never won a
        measured matrix, scripts/bench_space_oracle.py), widest first; tiles and schedules
        alternate, so the first few (a small sample's share) hold some of each."""
        return list(self._kernel_variants)

    @cached_property
    def _kernel_variants(self) -> tuple[Config, ...]:
        # built once per space: every sample and search set appends the same ones
        if self.op != "spmm":
            return ()
        plain = dict(self._baseline.knobs)
        widths = host_isa().variant_widths or (host_isa().vector_bits,)
        tiles = [
            {**plain, **VectorTile(bits, vregs, unroll).knobs}
            for bits in reversed(widths)
            for vregs in reversed(VARIANT_VREGS)
            for unroll in VARIANT_UNROLLS
            if VectorTile(bits, vregs, unroll) != DEFAULT_VECTOR
        ]
        schedules = [{**plain, **schedule.knobs} for schedule in VARIANT_SCHEDULES]
        knobs = [k for pair in itertools.zip_longest(schedules, tiles) for k in pair if k]
        return tuple(self.validate(k) for k in knobs)

    def sample_csr(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        if n < 0:
            raise CognateError(f"cannot sample a negative number of configs ({n})")
        rng = np.random.default_rng(seed)
        seen: set[int] = set()
        n_block = n // self._spec.sampler.block_denominator
        parts = self._fill(rng, n_block, shape, True, seen)
        have = sum(len(p) for p in parts)
        parts += self._fill(rng, n - have, shape, False, seen)
        rows = np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)
        return self._decode(rows)

    def candidates(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """The search set: ``sample``'s csr part (tens of thousands), then every legal
        family config."""
        return (
            self.sample_csr(n, seed, shape)
            + self.families.grid(shape, sampled=False)
            + self.kernel_variants()
        )


@cache
def make_space(op: str) -> CpuSpace:
    """The cpu space for ``op`` (cached: the YAML is read once per process)."""
    return CpuSpace(op)
