"""Model artifacts on disk: layout and checks (:mod:`.artifacts`), exporter (:mod:`.export`),
quantiser (:mod:`.quantize`), registry (:mod:`.registry`), errors (:mod:`.errors`).
No model runs here: running one is :mod:`flinkai.backends`' job.

Only :mod:`.artifacts` is imported here: the exporter needs torch and is imported
explicitly by the commands that use it.
"""

from flinkai.models.artifacts import (
    Manifest,
    ModelArtifacts,
    artifacts_dir,
    load_artifacts,
)
from flinkai.models.errors import ArtifactError, ChecksumMismatchError

__all__ = [
    "ArtifactError",
    "ChecksumMismatchError",
    "Manifest",
    "ModelArtifacts",
    "artifacts_dir",
    "load_artifacts",
]
