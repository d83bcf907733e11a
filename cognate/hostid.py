"""Which machine a record was measured on: a stable id, not the hostname.

A container restart changes the hostname but not the machine, and a resume must not redo
(and duplicate) every record then. The default id hashes what decides a timing: the CPU
model with its family and model numbers (a cloud VM may name a Zen 3 and a Zen 4 alike
"AMD EPYC"), its vector ISA, the cache sizes, the core count and the memory (rounded to
GiB). ``COGNATE_HOST_ID`` (or collect's ``--host-id``) names a machine explicitly. Records
of deterministic simulators (targets that are not ``exclusive``) are the same on every
machine: their host is ``sim``.

``host_profile()`` is what a cost model reads of a host: vector width, cache sizes, cores.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

from cognate.errors import CognateError

HOST_ENV = "COGNATE_HOST_ID"
SIMULATED_HOST = "sim"
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")


@cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (lower-case keys); empty elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo), or what platform knows of the processor."""
    info = _cpuinfo()
    for key in ("model name", "hardware", "cpu model"):
        if info.get(key):
            return info[key]
    return platform.processor() or platform.machine()


def _vector_bits_from_flags(flags: set[str]) -> int:
    if "avx512f" in flags:
        return 512
    if "avx2" in flags or "avx" in flags:
        return 256
    return 128


_CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"(\d+)([KMG]?)")


def _cache_bytes() -> dict[str, int]:
    """{"l1d", "l2", "llc"}: cpu0's data / unified cache sizes from sysfs (0 where unknown)."""
    sizes = {"l1d": 0, "l2": 0, "llc": 0}
    levels: dict[int, int] = {}
    for index in sorted(_CACHE_ROOT.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            match = _SIZE.fullmatch((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or match is None:
            continue
        scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
        levels[level] = int(match.group(1)) * scale
    sizes["l1d"] = levels.get(1, 0)
    sizes["l2"] = levels.get(2, 0)
    sizes["llc"] = levels[max(levels)] if levels else 0
    return sizes


@dataclass(frozen=True)
class HostProfile:
    """What decides a kernel's speed on a host, as a cost model reads it."""

    cpu_model: str
    cpu_family: str  # vendor family / model numbers ("25/17"): tell VMs of one name apart
    vector_bits: int  # widest vector the CPU has (512 with AVX-512F, 256 with AVX/AVX2)
    l1d_bytes: int
    l2_bytes: int
    llc_bytes: int
    cores: int

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)

    @property
    def cpu(self) -> str:
        """The model name with its family/model numbers: what the store's ``cpu`` holds."""
        return f"{self.cpu_model} ({self.cpu_family})"


class HostFacts(NamedTuple):
    """What the store records of the host beside each timing of a real machine (schema 3
    and 4 columns, in this order): the kernels' ISA and the CPU's caches and cores."""

    isa: str
    vector_bits: int
    cpu: str
    l1d_bytes: int
    l2_bytes: int
    llc_bytes: int
    cores: int

    @classmethod
    def of(cls, isa: str, vector_bits: int, profile: HostProfile | None = None) -> HostFacts:
        """This machine's facts for kernels built for ``isa`` (``profile``: another's)."""
        p = profile or host_profile()
        return cls(isa, vector_bits, p.cpu, p.l1d_bytes, p.l2_bytes, p.llc_bytes, p.cores)


@cache
def host_profile() -> HostProfile:
    """This machine's profile (/proc/cpuinfo and sysfs)."""
    info = _cpuinfo()
    caches = _cache_bytes()
    return HostProfile(
        cpu_model=cpu_model(),
        cpu_family=f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
        vector_bits=_vector_bits_from_flags(set(info.get("flags", "").split())),
        l1d_bytes=caches["l1d"],
        l2_bytes=caches["l2"],
        llc_bytes=caches["llc"],
        cores=os.cpu_count() or 1,
    )


def _memory_gib() -> int:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError, AttributeError):
        return 0


@cache
def machine_id() -> str:
    """``h-`` + 12 hex digits of sha256(host profile, memory in GiB)."""
    profile = host_profile()
    text = "|".join(str(v) for v in (*profile.as_dict().values(), _memory_gib()))
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def check_host_id(value: str, where: str = "--host-id") -> str:
    """A host id as given by a user: short, printable, no spaces."""
    if not _VALID.fullmatch(value):
        raise CognateError(
            f"{where} {value!r}: expected up to 64 letters, digits or ._:@- (no spaces)"
        )
    return value


def host_id() -> str:
    """This machine's id: ``$COGNATE_HOST_ID`` if set, else ``machine_id()``."""
    given = os.environ.get(HOST_ENV, "").strip()
    return check_host_id(given, HOST_ENV) if given else machine_id()


@cache
def is_simulated(target: str) -> bool:
    """Whether ``target`` is a registered deterministic simulator (not ``exclusive``)."""
    from cognate import targets  # the registry: imported only when asked

    if not targets.is_target(target):
        return False
    return not targets.get_target(target).exclusive


def host_for(target: str, host: str | None = None) -> str:
    """The host a record of ``target`` is keyed by: ``sim`` for simulators, else ``host``
    (given by the caller) or this machine's id."""
    if is_simulated(target):
        return SIMULATED_HOST
    return host or host_id()
