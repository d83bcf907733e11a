"""SuiteSparse ``.tar.gz`` / ``.tgz`` archives as downloaded: the ``<name>/<name>.mtx``
member is read straight from the archive, never extracted."""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

import scipy.sparse as sp

from cognate.errors import InputError
from cognate.formats.files import matrix_name
from cognate.formats.mtx import read_mtx_stream


def read_tar(path: Path) -> tuple[sp.csr_matrix, str, str]:
    """Read ``<name>/<name>.mtx`` from the archive without extracting anything to disk."""
    with tarfile.open(path, "r:*") as archive:
        members = archive.getmembers()
        for member in members:
            _check_tar_member(path, member)
        member = _pick_matrix_member(path, members)
        stream = archive.extractfile(member)
        if stream is None:
            raise InputError(path, f"archive member {member.name!r} cannot be read")
        with stream:
            return read_mtx_stream(path, stream)


def _check_tar_member(path: Path, member: tarfile.TarInfo) -> None:
    """Refuse unsafe members outright (stricter than tarfile's data_filter: no links at all)."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")) or (parts and ":" in parts[0]):
        raise InputError(path, f"archive member {member.name!r} has an absolute path")
    if ".." in parts or ".." in member.name.split("\\"):
        raise InputError(path, f"archive member {member.name!r} escapes the archive (..)")
    if member.issym() or member.islnk():
        raise InputError(path, f"archive member {member.name!r} is a link")
    if not (member.isfile() or member.isdir()):
        raise InputError(path, f"archive member {member.name!r} is a device or special file")


def _pick_matrix_member(path: Path, members: list[tarfile.TarInfo]) -> tarfile.TarInfo:
    name = matrix_name(path)
    files = [m for m in members if m.isfile()]
    wanted = [m for m in files if PurePosixPath(m.name).parts == (name, f"{name}.mtx")]
    if wanted:
        return wanted[0]
    mtx = [m for m in files if m.name.lower().endswith(".mtx")]
    if len(mtx) == 1:
        return mtx[0]
    if not mtx:
        raise InputError(path, "archive holds no .mtx file")
    raise InputError(path, f"archive has no {name}/{name}.mtx and several other .mtx files")
