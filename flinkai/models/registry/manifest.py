"""What the registry writes about a version: its file manifest and the ``CURRENT`` pointer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from flinkai.models.registry.errors import CorruptVersionError, RegistryError

__all__ = [
    "FORMAT_VERSION",
    "POINTER_FILE",
    "REGISTRY_MANIFEST",
    "Pointer",
    "PublishedModel",
    "RegistryFile",
    "VersionInfo",
    "VersionManifest",
    "check_relative_path",
]

FORMAT_VERSION = 1
REGISTRY_MANIFEST = "registry-manifest.json"
POINTER_FILE = "CURRENT"


@dataclass(frozen=True)
class RegistryFile:
    """One file of a version, by POSIX path relative to the version folder."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class VersionManifest:
    """Content of ``registry-manifest.json``.

    Attributes:
        name: Model name in the registry.
        version: Version name (the first 12 hex digits of a content hash by default).
        sequence: Publish order, strictly increasing per model name.
        created_at: ISO-8601 UTC time of the publish.
        files: Every file of the version except this manifest.
        metadata: Free-form strings given at publish (e.g. the base model of an adapter).
        format_version: Version of this manifest layout.
    """

    name: str
    version: str
    sequence: int
    created_at: str
    files: tuple[RegistryFile, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        data = {
            "format_version": self.format_version,
            "name": self.name,
            "version": self.version,
            "sequence": self.sequence,
            "created_at": self.created_at,
            "files": {f.path: {"sha256": f.sha256, "size": f.size} for f in self.files},
            "metadata": dict(self.metadata),
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, raw: bytes, where: Path) -> VersionManifest:
        """Parse and validate manifest bytes.

        Raises:
            CorruptVersionError: Not JSON, wrong format, or a path escaping the folder.
        """
        try:
            data = json.loads(raw.decode("utf-8"))
            if int(data["format_version"]) != FORMAT_VERSION:
                raise ValueError(f"format_version {data['format_version']} is not supported")
            manifest = cls(
                name=str(data["name"]),
                version=str(data["version"]),
                sequence=int(data["sequence"]),
                created_at=str(data["created_at"]),
                files=tuple(
                    RegistryFile(str(p), str(e["sha256"]), int(e["size"]))
                    for p, e in sorted(dict(data["files"]).items())
                ),
                metadata={str(k): str(v) for k, v in dict(data.get("metadata", {})).items()},
            )
        except (UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptVersionError(where, f"invalid manifest ({type(e).__name__}: {e})") from e
        for entry in manifest.files:
            check_relative_path(entry.path, where)
        return manifest


@dataclass(frozen=True)
class Pointer:
    """Content of ``CURRENT``: which version serves, and the hash of its manifest.

    Attributes:
        name: Model name.
        version: The serving version.
        sequence: That version's publish sequence number.
        manifest_sha256: sha256 of its ``registry-manifest.json`` (binds the pointer to
            exactly that manifest, so a replaced manifest is detected).
        generation: Incremented on every pointer swap, rollbacks included.
        published_at: ISO-8601 UTC time of the swap.
    """

    name: str
    version: str
    sequence: int
    manifest_sha256: str
    generation: int
    published_at: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class PublishedModel:
    """A verified version, ready to load.

    Attributes:
        name: Model name in the registry.
        version: Version name.
        path: The version folder (``<root>/<name>/versions/<version>``).
        manifest: Its registry manifest.
    """

    name: str
    version: str
    path: Path
    manifest: VersionManifest

    @property
    def sequence(self) -> int:
        return self.manifest.sequence

    @property
    def model_version(self) -> str:
        """``<name>@<version>``, the string written next to every output row."""
        return f"{self.name}@{self.version}"

    def file(self, rel: str) -> Path:
        """Path of one listed file.

        Raises:
            KeyError: The version has no such file.
        """
        if not any(f.path == rel for f in self.manifest.files):
            raise KeyError(f"{self.model_version} has no file {rel!r}")
        return self.path / rel

    @property
    def single_file(self) -> Path:
        """The only file of a single-file version (e.g. adapter weights).

        Raises:
            RegistryError: The version holds more than one file.
        """
        if len(self.manifest.files) != 1:
            raise RegistryError(
                f"{self.model_version} holds {len(self.manifest.files)} files, not one"
            )
        return self.path / self.manifest.files[0].path


@dataclass(frozen=True)
class VersionInfo:
    """One row of :meth:`ModelRegistry.list_versions`.

    Attributes:
        version: Version name.
        sequence: Publish sequence number (-1 when the manifest is unreadable).
        created_at: Publish time, empty when unknown.
        files: Number of files.
        size_bytes: Total size of the files.
        current: Whether ``CURRENT`` points at it.
        problem: Why the version cannot be served, or None when it is fine (only
            checked in full when listing with ``verify=True``).
    """

    version: str
    sequence: int
    created_at: str
    files: int
    size_bytes: int
    current: bool
    problem: str | None = None


def check_relative_path(rel: str, where: Path) -> None:
    p = PurePosixPath(rel)
    # Manifests and mappings are data: never let them point outside the version folder.
    if not rel or p.is_absolute() or ".." in p.parts or rel == REGISTRY_MANIFEST:
        raise CorruptVersionError(where, f"invalid file path {rel!r}")
