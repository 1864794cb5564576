"""Errors of the model registry, under :class:`flinkai.errors.FlinkAIError`."""

from __future__ import annotations

from pathlib import Path

from flinkai.errors import FlinkAIError

__all__ = [
    "CorruptVersionError",
    "ModelNotPublishedError",
    "RegistryError",
    "RegistryLockTimeoutError",
    "VersionConflictError",
]


class RegistryError(FlinkAIError):
    """Base class of the registry's errors."""


class ModelNotPublishedError(RegistryError):
    """No version of the model (or not the requested one) has been published."""


class CorruptVersionError(RegistryError):
    """A version's files or manifest are missing, partial or differ from the manifest.

    Attributes:
        path: The file or folder at fault.
    """

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path


class VersionConflictError(RegistryError):
    """The requested version exists with different content; versions are immutable."""


class RegistryLockTimeoutError(RegistryError):
    """Another publisher held the model's lock for longer than the timeout."""


# -- data ---------------------------------------------------------------------------------
