"""Which machine a record was measured on: a stable id, not the hostname.

A container restart changes the hostname but not the machine, and a resume must not redo
(and duplicate) every record then. The default id hashes what decides a timing: the CPU
model, the core count and the memory (rounded to GiB). ``COGNATE_HOST_ID`` (or collect's
``--host-id``) names a machine explicitly. Records of deterministic simulators (targets
that are not ``exclusive``) are the same on every machine: their host is ``sim``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from functools import cache

from cognate.errors import CognateError

HOST_ENV = "COGNATE_HOST_ID"
SIMULATED_HOST = "sim"
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo), or what platform knows of the processor."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> int:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError, AttributeError):
        return 0


@cache
def machine_id() -> str:
    """``h-`` + 12 hex digits of sha256(CPU model, core count, memory in GiB)."""
    text = f"{cpu_model()}|{os.cpu_count()}|{_memory_gib()}"
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
