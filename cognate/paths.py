"""Where cognate finds its configs, its cache and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def configs_dir() -> Path:
    """The YAML spaces and presets (configs/ at the repository root)."""
    return REPO_ROOT / "configs"


def kernels_dir() -> Path:
    """Kernel sources and templates (kernels/ at the repository root)."""
    return REPO_ROOT / "kernels"


def data_dir() -> Path:
    """Small files the product ships (shipped models and their provenance)."""
    return REPO_ROOT / "data"


def cognate_home() -> Path:
    """Cache root: ``$COGNATE_HOME``, else ``$XDG_CACHE_HOME/cognate``, else ~/.cache/cognate."""
    env = os.environ.get("COGNATE_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cognate"


def shared_dir() -> Path:
    """Real matrices and peer data: ``$COGNATE_SHARED``, else ../shared beside the checkout."""
    env = os.environ.get("COGNATE_SHARED")
    return Path(env).expanduser() if env else REPO_ROOT.parent / "shared"


def corpus_dir() -> Path:
    """Generated corpus root (``scripts/make_corpus.py`` writes its sets below it):
    ``$COGNATE_CORPUS``, else ``<cognate home>/corpus``."""
    env = os.environ.get("COGNATE_CORPUS")
    return Path(env).expanduser() if env else cognate_home() / "corpus"
