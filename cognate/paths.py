"""Where cognate finds its configs, its cache and the shared data folder."""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

# The source checkout (editable installs) or, in an installed wheel, site-packages.
REPO_ROOT = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=1)  # where the package lives does not change in a process
def _package_data() -> Path | None:
    """``cognate/_data`` in an installed wheel (setup.py copies configs/, kernels/ and
    data/models/ there); None in a source checkout, where the folders stay at the root."""
    root = resources.files("cognate") / "_data"
    return root if isinstance(root, Path) and root.is_dir() else None


def _shipped(name: str, source: str) -> Path:
    data = _package_data()
    return data / name if data is not None else REPO_ROOT / source


def configs_dir() -> Path:
    """The YAML spaces and presets (configs/ at the repository root; shipped in the wheel)."""
    return _shipped("configs", "configs")


def kernels_dir() -> Path:
    """Kernel sources and templates (kernels/ at the repository root; shipped in the wheel)."""
    return _shipped("kernels", "kernels")


def data_dir() -> Path:
    """Small files the product ships: ``data_dir() / "models"`` holds the shipped models and
    their provenance (data/models/ at the repository root; shipped in the wheel)."""
    data = _package_data()
    return data if data is not None else REPO_ROOT / "data"


def cognate_home() -> Path:
    """Cache root: ``$COGNATE_HOME``, else ``$XDG_CACHE_HOME/cognate``, else ~/.cache/cognate."""
    env = os.environ.get("COGNATE_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cognate"


def default_db_path() -> Path:
    """The store a command uses when given no ``--db``: ``$COGNATE_HOME/records.sqlite``."""
    return cognate_home() / "records.sqlite"


def shared_dir() -> Path:
    """Real matrices and peer data: ``$COGNATE_SHARED``, else ../shared beside the checkout."""
    env = os.environ.get("COGNATE_SHARED")
    return Path(env).expanduser() if env else REPO_ROOT.parent / "shared"


def corpus_dir() -> Path:
    """Generated corpus root (``scripts/make_corpus.py`` writes its sets below it):
    ``$COGNATE_CORPUS``, else ``<cognate home>/corpus``."""
    env = os.environ.get("COGNATE_CORPUS")
    return Path(env).expanduser() if env else cognate_home() / "corpus"
