"""The root of flinkai's exception tree.

Each subpackage defines its own errors under :class:`FlinkAIError` so callers can
catch one type at a process boundary (the CLI) and specific types where they can act.
"""

from __future__ import annotations

__all__ = ["ConfigError", "FlinkAIError", "MissingDependencyError", "SetupError"]


class FlinkAIError(Exception):
    """Base class for every error flinkai raises on purpose."""


class ConfigError(FlinkAIError):
    """A config file, override or placeholder is invalid or missing."""


class SetupError(FlinkAIError):
    """A prerequisite (jars, model artifacts, Java, Maven) is missing or broken."""


class MissingDependencyError(FlinkAIError, ImportError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed; install it with: pip install 'flinkai[{extra}]'"
        )
        self.package = package
        self.extra = extra


def require(module: str, extra: str) -> object:
    """Import an optional module, or fail with a message naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(module, extra) from e
