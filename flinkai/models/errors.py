"""Errors about model artifacts on disk: export, quantisation, checks, control messages.

Registry errors live in :mod:`flinkai.models.registry.errors`; all of them are
:class:`flinkai.errors.FlinkAIError` subclasses, except :class:`ControlMessageError`,
a ``ValueError`` that a control-topic consumer logs and skips.
"""

from __future__ import annotations

from pathlib import Path

from flinkai.errors import SetupError

__all__ = [
    "EXPORT_HINT",
    "ArtifactError",
    "ChecksumMismatchError",
    "ControlMessageError",
    "ExportError",
    "QuantizeError",
]

#: How to (re)build artifacts, appended to errors about them.
EXPORT_HINT = "run `flinkai model export`"


class ArtifactError(SetupError):
    """Model artifacts are missing, incomplete or inconsistent with the config."""


class ChecksumMismatchError(ArtifactError):
    """A file's size or sha256 differs from the manifest."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"{path}: {detail}; the artifact is corrupted or was changed after export "
            f"({EXPORT_HINT} --force to rebuild)"
        )
        self.path = path


class ExportError(SetupError):
    """The export or its verification failed; nothing was written at the target."""


class QuantizeError(SetupError):
    """Quantisation failed or its result was not accurate enough; nothing was installed."""


class ControlMessageError(ValueError):
    """A control message that cannot be used; the text says why."""
