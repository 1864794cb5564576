"""Where flinkai keeps what it builds: jars, exported models, broker data.

Everything lives under one cache root (``FLINKAI_HOME``, default ``~/.cache/flinkai``)
so nothing generated ends up in the repository and one ``rm -rf`` resets a machine.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["bundled_udf_dir", "cache_root", "jars_dir", "models_dir", "package_dir", "repo_root"]


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


def bundled_udf_dir() -> Path:
    """The UDF modules that ship in the package (``flinkai/udfs``), shipped to workers as a folder."""
    return package_dir() / "udfs"


def repo_root() -> Path | None:
    """The source checkout root when running from one (has ``jobs/`` and ``pyproject.toml``)."""
    root = package_dir().parent
    return root if (root / "jobs").is_dir() and (root / "pyproject.toml").is_file() else None
