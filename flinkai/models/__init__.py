"""Exported model artifacts: layout and checks (:mod:`.artifacts`), exporter (:mod:`.export`).

Only :mod:`.artifacts` is imported here: the exporter needs torch and is imported
explicitly by the commands that use it.
"""

from flinkai.models.artifacts import (
    ArtifactError,
    ChecksumMismatchError,
    Manifest,
    ModelArtifacts,
    artifacts_dir,
    load_artifacts,
)

__all__ = [
    "ArtifactError",
    "ChecksumMismatchError",
    "Manifest",
    "ModelArtifacts",
    "artifacts_dir",
    "load_artifacts",
]
