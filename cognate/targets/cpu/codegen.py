"""Generate, compile and cache the C kernel of one cpu loop structure.

A loop structure is what changes the shape of the loop nest: the op, the loop order, the
U/C format of A's four levels, which dense x0 levels are trivial (split 1, so the loop
disappears and baseline CSR is exactly CSR), and optionally the dense width as a
compile-time constant (a collection uses one width, so this adds no variants, and a
constant trip count lets the compiler unroll the vector loop; docs/benchmarks.md). Splits,
dimensions and chunk are runtime arguments, so one compiled library serves many configs.

Nothing but names from the whitelists below reaches the C source: the knobs are checked
here again even though the space validated them (defence in depth).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from string import Template
from typing import Any

from cognate.errors import CognateError
from cognate.paths import kernels_dir
from cognate.targets.cpu.isa import VECTOR_BITS, check_vector_bits


@dataclass(frozen=True)
class OpLoops:
    """The loop vocabulary of one op: two sparse variables (A's) and one dense one."""

    names: tuple[str, ...]  # the six loop names; the first four are A's, in format order
    sparse: tuple[str, str]  # A's variables: rows first
    dense: str  # the variable that runs along dense rows (vectorised)
    dims: Mapping[str, str]  # variable -> C name of its extent
    function: str  # symbol in the compiled library


OP_LOOPS: dict[str, OpLoops] = {
    "spmm": OpLoops(
        names=("i1", "i0", "k1", "k0", "j1", "j0"),
        sparse=("i", "k"),
        dense="j",
        dims={"i": "M", "k": "K", "j": "N"},
        function="cognate_spmm",
    ),
    "sddmm": OpLoops(
        names=("i1", "i0", "j1", "j0", "k1", "k0"),
        sparse=("i", "j"),
        dense="k",
        dims={"i": "M", "j": "N", "k": "K"},
        function="cognate_sddmm",
    ),
}
FORMATS: tuple[str, ...] = ("U", "C")


# The plain CSR SpMM kernel's vector knobs and their legal values. A config without them runs
# DEFAULT_VECTOR, the kernel before the knobs existed (so its records keep their meaning).
VECTOR_KNOBS: dict[str, tuple[int, ...]] = {
    "vbits": VECTOR_BITS,  # vector width in bits
    "vregs": (1, 2, 4, 8),  # vectors of C summed in registers per pass over a row
    "unroll": (1, 2, 4),  # nonzeros per step
}


@dataclass(frozen=True)
class VectorTile:
    """The plain CSR SpMM kernel's vector width, register tile and unroll."""

    vbits: int = 256
    vregs: int = 8
    unroll: int = 2

    @property
    def knobs(self) -> dict[str, int]:
        return {"vbits": self.vbits, "vregs": self.vregs, "unroll": self.unroll}

    @property
    def accumulators(self) -> int:
        """Independent accumulator sets: one per unrolled nonzero where they fit 8 registers
        (a narrow tile's FMA chains would otherwise wait on each other), else one."""
        return self.unroll if self.vregs * self.unroll <= 8 else 1

    def words(self) -> str:
        return f"vec {self.vbits}b x{self.vregs} unroll {self.unroll}"


DEFAULT_VECTOR = VectorTile()


# The plain CSR SpMM kernel's schedule knobs and their legal values. A config without them
# runs the kernel's default schedule (one thread for small products, weight-balanced tasks,
# no prefetch), so its records keep their meaning.
SCHEDULE_KNOBS: dict[str, tuple[int, ...]] = {
    "threads": (0, 1),  # 1: one thread; 0: all of OpenMP's threads
    "prefetch": (0, 4, 16),  # B rows prefetched this many nonzeros ahead (0: none)
    "batch": (0, 16, 64, 256),  # rows per claim from an atomic counter (0: balanced tasks)
    "nzsplit": (0, 1),  # 1: merge-path split of rows + nonzeros, one equal share per thread
}


@dataclass(frozen=True)
class Schedule:
    """The plain CSR SpMM kernel's thread count, prefetch distance and row schedule."""

    threads: int = 0
    prefetch: int = 0
    batch: int = 0
    nzsplit: int = 0

    @property
    def knobs(self) -> dict[str, int]:
        return {
            "threads": self.threads,
            "prefetch": self.prefetch,
            "batch": self.batch,
            "nzsplit": self.nzsplit,
        }

    def problem(self) -> str | None:
        """Why this combination is not in the space (one kernel, one config), or None."""
        if self.threads == 1 and (self.batch or self.nzsplit):
            return "threads=1 runs the rows in order: batch and nzsplit must be 0"
        if self.batch and self.nzsplit:
            return "batch and nzsplit are two schedules: one of them must be 0"
        return None

    def words(self) -> str:
        threads = "1 thread" if self.threads == 1 else "all threads"
        rows = "nzsplit" if self.nzsplit else f"batch {self.batch}" if self.batch else "tasks"
        return f"{threads} {rows} prefetch {self.prefetch}"


# The plain CSR SpMM kernel's C stores: stream 1 writes C's full vector tiles with
# non-temporal stores (kernels/cpu/spmm_csr.c says when that pays). A knob group of its own,
# so configs and records without it keep their meaning (plain stores).
STORE_KNOBS: dict[str, tuple[int, ...]] = {"stream": (0, 1)}

# The plain CSR SpMM kernel's B precision: bf16 1 rounds B to bfloat16 (to nearest even) at
# the start of each call and reads that copy, summing in float32 (half of B's bytes, where
# L2 reads bind: kernels/cpu/spmm_csr.c). It changes the result (B's rounding: about 2^-9
# relative per element), so it is opt-in: never sampled, ranked or varied unless asked
# (``tune(..., bf16=True)``), and checked against scipy on the rounded B.
PRECISION_KNOBS: dict[str, tuple[int, ...]] = {"bf16": (0, 1)}


# Knobs that change the plain CSR SpMM kernel's code only, never A's packed layout.
KERNEL_ONLY_KNOBS: frozenset[str] = frozenset(
    {*VECTOR_KNOBS, *SCHEDULE_KNOBS, *STORE_KNOBS, *PRECISION_KNOBS}
)


# The plain CSR SpMM kernel's one-knob groups: (knob, its group, the group's name).
FLAG_KNOBS = (("stream", STORE_KNOBS, "store"), ("bf16", PRECISION_KNOBS, "precision"))


def flags_of(knobs: Mapping[str, Any]) -> dict[str, int]:
    """The config's ``stream`` and ``bf16`` knobs, each checked against its whitelist (0 when
    absent)."""
    found = {}
    for knob, group, what in FLAG_KNOBS:
        values = _knob_group(knobs, group, what)
        found[knob] = 0 if values is None else values[knob]
    return found


def schedule_of(knobs: Mapping[str, Any]) -> Schedule | None:
    """The config's schedule knobs (all four or none), each checked against its whitelist."""
    values = _knob_group(knobs, SCHEDULE_KNOBS, "schedule")
    if values is None:
        return None
    schedule = Schedule(**values)
    problem = schedule.problem()
    if problem:
        raise CognateError(f"cpu spmm: {problem}")
    return schedule


def _knob_group(
    knobs: Mapping[str, Any], group: Mapping[str, tuple[int, ...]], what: str
) -> dict[str, int] | None:
    """A group of whitelisted integer knobs that come together: their values, None if absent."""
    given = [name for name in group if name in knobs]
    if not given:
        return None
    if len(given) != len(group):
        raise CognateError(f"cpu spmm: {what} knobs come together: {', '.join(group)}")
    values = {}
    for name, legal in group.items():
        value = knobs[name]
        if isinstance(value, bool) or not isinstance(value, int) or value not in legal:
            raise CognateError(f"cpu spmm: {name} must be one of {legal}, got {value!r}"[:200])
        values[name] = int(value)
    return values


def vector_of(knobs: Mapping[str, Any]) -> VectorTile | None:
    """The config's vector knobs (all three or none), each checked against its whitelist;
    a width over this host's widest vector is refused (isa.check_vector_bits)."""
    values = _knob_group(knobs, VECTOR_KNOBS, "vector")
    if values is None:
        return None
    check_vector_bits(values["vbits"])
    return VectorTile(**values)


@dataclass(frozen=True)
class LoopStructure:
    """The compile-time part of a cpu config."""

    op: str
    order: tuple[str, ...]  # six loop names, outermost first
    formats: tuple[str, ...]  # U/C of A's levels, in OP_LOOPS[op].names[:4] order
    unit: tuple[str, ...] = ()  # sparse variables whose x0 level is U with split 1
    width: int | None = None  # the dense width compiled in as a constant; None: runtime
    vector: VectorTile | None = None  # plain CSR SpMM only: the config's vector knobs
    schedule: Schedule | None = None  # plain CSR SpMM only: the config's schedule knobs
    stream: int = 0  # plain CSR SpMM only: 1 = C's tiles written with streaming stores
    bf16: int = 0  # plain CSR SpMM only: 1 = B read as bfloat16 (PRECISION_KNOBS)

    @property
    def loops(self) -> OpLoops:
        return OP_LOOPS[self.op]

    @property
    def levels(self) -> tuple[tuple[str, str], ...]:
        """A's storage levels (loop name, format), in the order they appear in ``order``."""
        fmt = dict(zip(self.loops.names[:4], self.formats, strict=True))
        return tuple((name, fmt[name]) for name in self.order if name in fmt)

    @property
    def parallel(self) -> str:
        """The OpenMP loop: i1 for SpMM (rows own C); SDDMM: the first of i1/j1 (WACO's paridx)."""
        if self.op == "spmm":
            return "i1"
        return next(name for name in self.order if name in ("i1", "j1"))


def _knob_splits(op: str) -> dict[str, str]:
    """Sparse variable -> its split knob."""
    return {var: f"{var}split" for var in OP_LOOPS[op].sparse}


# The widest dense operand the generated kernels are specialised for: the target's max_width.
MAX_SPECIALISED_WIDTH = 4096


def _checked_width(width: Any) -> int | None:
    if width is None:
        return None
    if not isinstance(width, int) or isinstance(width, bool):
        raise CognateError(f"cpu kernels: the dense width must be an integer, got {width!r}")
    if not 1 <= width <= MAX_SPECIALISED_WIDTH:
        raise CognateError(f"cpu kernels: dense width {width} outside 1..{MAX_SPECIALISED_WIDTH}")
    return width


def structure_of(op: str, knobs: Mapping[str, Any], width: int | None = None) -> LoopStructure:
    """Check the structural knobs against the whitelists and return the loop structure.

    ``width``: specialise the kernel to this dense width (None: width at run time).
    """
    if op not in OP_LOOPS:
        raise CognateError(f"cpu kernels: unknown op {op!r}")
    loops = OP_LOOPS[op]
    order = knobs.get("order")
    if not isinstance(order, list | tuple) or sorted(map(str, order)) != sorted(loops.names):
        raise CognateError(f"cpu {op}: order must be a permutation of {' '.join(loops.names)}")
    if not all(isinstance(name, str) and name in loops.names for name in order):
        raise CognateError(f"cpu {op}: order has a name outside {' '.join(loops.names)}")
    for var in "ijk":
        if order.index(f"{var}1") > order.index(f"{var}0"):
            raise CognateError(f"cpu {op}: {var}1 must come before {var}0 in the order")
    formats = knobs.get("formats")
    if (
        not isinstance(formats, list | tuple)
        or len(formats) != 4
        or not all(isinstance(f, str) and f in FORMATS for f in formats)
    ):
        raise CognateError(f"cpu {op}: formats must be 4 of U/C")
    unit = []
    for index, var in enumerate(loops.sparse):
        split = knobs.get(_knob_splits(op)[var])
        if not isinstance(split, int) or isinstance(split, bool) or split < 1:
            raise CognateError(f"cpu {op}: {var}split must be a positive integer")
        if split == 1 and formats[2 * index + 1] == "U":
            unit.append(var)
    structure = LoopStructure(op, tuple(order), tuple(formats), tuple(unit), _checked_width(width))
    vector = vector_of(knobs)
    if vector is not None:
        if not has_plain_csr_shape(structure):
            raise CognateError(f"cpu {op}: vector knobs apply to the plain CSR SpMM kernel only")
        structure = replace(structure, vector=vector)
    schedule = schedule_of(knobs)
    if schedule is not None:
        if not has_plain_csr_shape(structure):
            raise CognateError(f"cpu {op}: schedule knobs apply to the plain CSR SpMM kernel only")
        structure = replace(structure, schedule=schedule)
    for knob, value in flags_of(knobs).items():
        if value:
            if not has_plain_csr_shape(structure):
                raise CognateError(
                    f"cpu {op}: the {knob} knob applies to the plain CSR SpMM kernel only"
                )
            structure = replace(structure, **{knob: value})
    return structure


class _Nest:
    """Emits nested C blocks with indentation and counts the braces to close."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.open_blocks = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def open(self, header: str) -> None:
        self.line(header + " {")
        self.depth += 1
        self.open_blocks += 1

    def close_all(self) -> str:
        while self.open_blocks:
            self.depth -= 1
            self.open_blocks -= 1
            self.line("}")
        return "\n".join(self.lines)


PARALLEL_PRAGMA = "#pragma omp parallel for schedule(dynamic, chunk)"


def _emit_sparse_loop(nest: _Nest, s: LoopStructure, name: str, level: int) -> None:
    """One level of A: a dense range or a pos/crd segment, then its position p<level>."""
    var, part = name[0], name[1]
    fmt = dict(s.levels)[name]
    parent = "0" if level == 0 else f"p{level - 1}"
    pragma = [PARALLEL_PRAGMA] if name == s.parallel else []
    dim, split = s.loops.dims[var], f"{var}split"
    if fmt == "C":
        nest.line(f"const int64_t p{level}_lo = pos{level}[{parent}];")
        nest.line(f"const int64_t p{level}_hi = pos{level}[{parent} + 1];")
        for text in pragma:
            nest.line(text)
        nest.open(f"for (int64_t p{level} = p{level}_lo; p{level} < p{level}_hi; p{level}++)")
        nest.line(f"const int64_t {name} = crd{level}[p{level}];")
    elif part == "1":
        for text in pragma:
            nest.line(text)
        nest.open(f"for (int64_t {name} = 0; {name} < ext_{var}1; {name}++)")
        nest.line(f"const int64_t p{level} = {parent} * ext_{var}1 + {name};")
    elif var in s.unit:  # split 1: the level has extent 1, no loop
        nest.line(f"const int64_t p{level} = {parent};")
    else:  # dense x0: padded extent `split`, iterate only the real coordinates
        nest.line(f"const int64_t {name}_end = min64({split}, {dim} - {var}1 * {split});")
        nest.open(f"for (int64_t {name} = 0; {name} < {name}_end; {name}++)")
        nest.line(f"const int64_t p{level} = {parent} * {split} + {name};")
    if part == "0":
        full = f"{var}1" if var in s.unit else f"{var}1 * {split} + {var}0"
        nest.line(f"const int64_t {var} = {full};")
    if level == 3:
        nest.line("const float v = vals[p3];")


def _vector_body(op: str, start: str, end: str, index: str) -> list[str]:
    """The innermost dense loop over [start, start + end): contiguous, vectorised."""
    if op == "spmm":
        return [
            f"float *restrict c_row = C + i * N + {start};",
            f"const float *restrict b_row = B + k * N + {start};",
            "#pragma omp simd",
            f"for (int64_t {index} = 0; {index} < {end}; {index}++)"
            f" c_row[{index}] += v * b_row[{index}];",
        ]
    return [
        f"const float *restrict x_row = X + i * K + {start};",
        f"const float *restrict y_row = Y + j * K + {start};",
        "float acc = 0.0f;",
        "#pragma omp simd reduction(+:acc)",
        f"for (int64_t {index} = 0; {index} < {end}; {index}++)"
        f" acc += x_row[{index}] * y_row[{index}];",
        "out[p3] += v * acc;",
    ]


SCALAR_BODY = {
    "spmm": "C[i * N + j] += v * B[k * N + j];",
    "sddmm": "out[p3] += v * X[i * K + k] * Y[j * K + k];",
}


def _emit_dense_loop(nest: _Nest, s: LoopStructure, name: str, innermost: bool) -> bool:
    """A loop over the dense variable; returns True when it emitted the body too."""
    var, part = name[0], name[1]
    dim, split = s.loops.dims[var], f"{var}split"
    fused = s.order[-2:] == (f"{var}1", f"{var}0")
    if part == "1" and fused:
        # x1 x0 innermost and adjacent visit 0..dim-1 in order: one contiguous loop.
        for text in _vector_body(s.op, "0", dim, var):
            nest.line(text)
        return True
    if part == "1":  # never the parallel loop: that is always one of A's
        nest.open(f"for (int64_t {name} = 0; {name} < ext_{var}1; {name}++)")
        return False
    nest.line(f"const int64_t {name}_end = min64({split}, {dim} - {var}1 * {split});")
    if innermost:
        for text in _vector_body(s.op, f"{var}1 * {split}", f"{name}_end", name):
            nest.line(text)
        return True
    nest.open(f"for (int64_t {name} = 0; {name} < {name}_end; {name}++)")
    nest.line(f"const int64_t {var} = {var}1 * {split} + {name};")
    return False


def loop_nest_source(s: LoopStructure) -> str:
    """The C statements of the loop nest for ``s`` (names from the whitelist only)."""
    nest = _Nest()
    level_of = {name: index for index, (name, _) in enumerate(s.levels)}
    body_done = False
    for position, name in enumerate(s.order):
        if body_done:
            break
        if name in level_of:
            _emit_sparse_loop(nest, s, name, level_of[name])
        else:
            innermost = position == len(s.order) - 1
            body_done = _emit_dense_loop(nest, s, name, innermost)
    if not body_done:
        nest.line(SCALAR_BODY[s.op])
    return nest.close_all()


def _checked(s: LoopStructure) -> LoopStructure:
    """Re-check a structure built by hand (the dataclass does not validate itself)."""
    knobs: dict[str, Any] = {"order": list(s.order), "formats": list(s.formats)}
    for var in OP_LOOPS.get(s.op, OP_LOOPS["spmm"]).sparse:
        knobs[f"{var}split"] = 1 if var in s.unit else 2
    if s.vector is not None:
        knobs.update(s.vector.knobs)
    if s.schedule is not None:
        knobs.update(s.schedule.knobs)
    knobs.update({knob: getattr(s, knob) for knob, _, _ in FLAG_KNOBS if getattr(s, knob)})
    if structure_of(s.op, knobs, s.width) != s:
        raise CognateError(f"cpu {s.op}: inconsistent loop structure {s}")
    return s


PLAIN_CSR_ORDER = ("i1", "i0", "k1", "k0", "j1", "j0")


def is_plain_csr(s: LoopStructure) -> bool:
    """Whether ``s`` is CSR SpMM itself (rows dense, columns compressed, both sparse splits 1,
    the dense pair innermost) at a compile-time width: kernels/cpu/spmm_csr.c, a hand-written
    kernel with the same signature, runs it instead of the generated nest (its register tile
    and weight-balanced row tasks are beyond the generator)."""
    return s.width is not None and has_plain_csr_shape(s)


def has_plain_csr_shape(s: LoopStructure) -> bool:
    """``is_plain_csr`` but for the width (the loop structure alone)."""
    return (
        s.op == "spmm"
        and s.order == PLAIN_CSR_ORDER
        and s.formats[0] == "U"
        and s.formats[2] == "C"
        and set(s.unit) == {"i", "k"}
    )


def include(name: str) -> str:
    """The text of kernels/cpu/<name>.inc (shared C the templates paste in at ``${name}``)."""
    return (kernels_dir() / "cpu" / f"{name}.inc").read_text()


def generate_source(s: LoopStructure) -> str:
    """Full C source of the kernel for ``s``."""
    s = _checked(s)
    if is_plain_csr(s):
        vector = s.vector or DEFAULT_VECTOR
        template = Template((kernels_dir() / "cpu" / "spmm_csr.c").read_text())
        return template.substitute(
            dense_extent=str(int(s.width)),  # type: ignore[arg-type]
            vbytes=str(int(vector.vbits) // 8),
            vregs=str(int(vector.vregs)),
            unroll=str(int(vector.unroll)),
            accs=str(int(vector.accumulators)),
            tasks=include("tasks"),
            stream=str(int(s.stream)),
            bf16=str(int(s.bf16)),
            **_schedule_params(s.schedule),
        )
    if s.vector is not None or s.schedule is not None or s.stream or s.bf16:  # nests have none
        raise CognateError(f"cpu {s.op}: vector and schedule knobs need a width compiled in")
    template = Template((kernels_dir() / "cpu" / f"{s.op}.c").read_text())
    runtime = "N_arg" if s.op == "spmm" else "K_arg"
    extent = runtime if s.width is None else str(int(s.width))
    return template.substitute(loop_nest=loop_nest_source(s), dense_extent=extent)


def _schedule_params(schedule: Schedule | None) -> dict[str, str]:
    """spmm_csr.c's schedule constants (THREADS 0: the kernel's own small-product rule)."""
    if schedule is None:
        return {"threads": "0", "prefetch": "0", "batch": "0", "nzsplit": "0"}
    return {
        "threads": "1" if schedule.threads == 1 else "2",
        "prefetch": str(int(schedule.prefetch)),
        "batch": str(int(schedule.batch)),
        "nzsplit": str(int(schedule.nzsplit)),
    }
