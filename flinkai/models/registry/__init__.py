"""A versioned model registry on a local file system: atomic publish, lock-free reads.

Layout under the registry root (one folder per model name)::

    <root>/<name>/
      .lock                         flock(2) target; serialises publishers (holds the pid)
      CURRENT                       JSON pointer: version, manifest sha256, sequence, ...
      versions/<version>/           immutable once renamed into place
        registry-manifest.json      sha256 + size of every file, sequence, metadata
        ...files...                 a whole model folder, or one file (LoRA adapter weights)
      versions/.tmp-<uuid>/         a publish in progress, or the debris of a crashed one

A publish writes a new version into a temporary folder next to its final place,
makes every byte and directory entry durable, renames the folder into place, and
only then swaps ``CURRENT`` with a second rename. Readers never lock: they read
``CURRENT`` and the version it names, and they check the version against its
manifest, so at any crash point they see the old version or the new one, complete.
See ``docs/model-registry.md`` for the protocol step by step.

The package: :mod:`.store` (the registry), :mod:`.manifest` (version manifest and
pointer), :mod:`.durable` (fsync'd writes), :mod:`.errors`.
"""

from flinkai.config import RegistryConfig
from flinkai.models.registry.errors import (
    CorruptVersionError,
    ModelNotPublishedError,
    RegistryError,
    RegistryLockTimeoutError,
    VersionConflictError,
)
from flinkai.models.registry.manifest import (
    POINTER_FILE,
    REGISTRY_MANIFEST,
    Pointer,
    PublishedModel,
    RegistryFile,
    VersionInfo,
    VersionManifest,
)
from flinkai.models.registry.store import (
    CRASH_POINTS,
    ModelRegistry,
    VerifyMode,
    default_registry_root,
    registry_root,
)

__all__ = [
    "CRASH_POINTS",
    "POINTER_FILE",
    "REGISTRY_MANIFEST",
    "CorruptVersionError",
    "ModelNotPublishedError",
    "ModelRegistry",
    "Pointer",
    "PublishedModel",
    "RegistryConfig",
    "RegistryError",
    "RegistryFile",
    "RegistryLockTimeoutError",
    "VerifyMode",
    "VersionConflictError",
    "VersionInfo",
    "VersionManifest",
    "default_registry_root",
    "registry_root",
]
