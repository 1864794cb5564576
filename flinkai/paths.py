"""Where flinkai keeps what it builds: jars, exported models, broker data.

Everything lives under one cache root (``FLINKAI_HOME``, default ``~/.cache/flinkai``)
so nothing generated ends up in the repository and one ``rm -rf`` resets a machine.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "jars_dir", "models_dir", "package_dir", "repo_root"]


def cache_root() -> Path:
    """The root folder for generated artifacts (``$FLINKAI_HOME``)."""
    env = os.environ.get("FLINKAI_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "flinkai"


def jars_dir(kind: str) -> Path:
    """Folder of resolved jars of one kind: ``connector`` or ``kafka``."""
    return cache_root() / "jars" / kind


def models_dir() -> Path:
    """Root of exported model artifacts."""
    return cache_root() / "models"


def package_dir() -> Path:
    """The installed ``flinkai`` package folder."""
    return Path(__file__).resolve().parent


def repo_root() -> Path | None:
    """The source checkout root when running from one (has ``jobs/`` and ``udfs/``)."""
    root = package_dir().parent
    return root if (root / "jobs").is_dir() and (root / "udfs").is_dir() else None
