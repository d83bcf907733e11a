"""The host's vector ISA, read once from the compiler the kernels are built with.

``gcc -march=native -dM -E`` lists the macros the kernels themselves are compiled under, so
the answer is exactly what generated code may use (cpuid would also need the compiler's and
the OS's support checked). Three levels matter to the kernels: AVX-512 (512-bit vectors),
AVX / AVX2 (256-bit), anything else (128-bit generic vectors, which gcc lowers to SSE, NEON
or scalar code).

A vector width over the host's widest is refused (``check_vector_bits``), not narrowed: gcc
would split a 512-bit vector type into two 256-bit halves on an AVX2 host and the kernel
would run, but it would not be the kernel the config names, and its record would say 512.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cache

from cognate.build import BASE_FLAGS, CC
from cognate.errors import CognateError

VECTOR_BITS: tuple[int, ...] = (128, 256, 512)  # every width a cpu kernel may be built for


@dataclass(frozen=True)
class HostIsa:
    """What the kernels' compiler targets on this host."""

    name: str  # "avx512", "avx2", "avx" or "generic"
    vector_bits: int  # the widest vector the generated kernels use natively

    @property
    def widths(self) -> tuple[int, ...]:
        """The vector widths a kernel may name on this host, narrowest first."""
        return tuple(bits for bits in VECTOR_BITS if bits <= self.vector_bits)

    @property
    def variant_widths(self) -> tuple[int, ...]:
        """The widths the plain CSR kernel's variants use here: from 256 bits up (128-bit
        vectors never won a measured matrix, scripts/bench_space_oracle.py)."""
        return tuple(bits for bits in self.widths if bits >= 256)

    def line(self) -> str:
        return f"host ISA {self.name} ({self.vector_bits}-bit vectors)"


def isa_from_macros(macros: str) -> HostIsa:
    """The ISA named by a compiler's predefined macros (``-dM -E`` output)."""
    defined = {line.split()[1] for line in macros.splitlines() if line.startswith("#define ")}
    if "__AVX512F__" in defined:
        return HostIsa("avx512", 512)
    if "__AVX2__" in defined:
        return HostIsa("avx2", 256)
    if "__AVX__" in defined:
        return HostIsa("avx", 256)
    return HostIsa("generic", 128)


@cache
def host_isa() -> HostIsa:
    """This host's ISA under the kernels' flags (one compiler call per process)."""
    march = [flag for flag in BASE_FLAGS if flag.startswith("-march=")]
    try:
        done = subprocess.run(
            [CC, *march, "-dM", "-E", "-x", "c", "-"],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CognateError(
            f"cpu kernels: cannot read the compiler's target macros: {exc}"
        ) from None
    return isa_from_macros(done.stdout)


def check_vector_bits(bits: int) -> int:
    """``bits`` if this host's kernels can use vectors that wide; else one clear line."""
    if bits not in VECTOR_BITS:
        raise CognateError(f"cpu kernels: vector width {bits!r} is not one of {VECTOR_BITS}")
    isa = host_isa()
    if bits > isa.vector_bits:
        raise CognateError(
            f"cpu kernels: a {bits}-bit vector kernel needs a wider ISA than this host's"
            f" ({isa.name}, {isa.vector_bits}-bit)"
        )
    return bits
