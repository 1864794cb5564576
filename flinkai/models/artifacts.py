"""The on-disk layout of an exported embedding model, and its integrity checks.

``flinkai model export`` writes one folder per model (``models_dir()/<name>`` unless
``ModelConfig.dir`` says otherwise)::

    <name>/
      manifest.json                 name, version, shapes, source, sha256 + size of every file
      model.onnx                    fp32, opset 17, mean pooling + L2 normalisation in the graph
      tokenizer.json                truncation at max_seq_length, no padding
      triton/<name>/config.pbtxt    Triton model repository (onnxruntime backend)
      triton/<name>/1/model.onnx    hard link to (or copy of) model.onnx

The manifest is the contract: runtimes read names, shapes and the version from it
and refuse to start on a missing or corrupted file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from flinkai.config import ModelConfig
from flinkai.models.errors import EXPORT_HINT, ArtifactError, ChecksumMismatchError
from flinkai.paths import models_dir
from flinkai.staging import staged_file

__all__ = [
    "FORMAT_VERSION",
    "INPUT_NAMES",
    "MANIFEST_FILE",
    "MODEL_FILE",
    "OUTPUT_NAME",
    "TOKENIZER_FILE",
    "TRITON_DIR",
    "VARIANT_FILES",
    "FileEntry",
    "Manifest",
    "ModelArtifacts",
    "TensorSpec",
    "artifacts_dir",
    "build_manifest",
    "load_artifacts",
    "read_manifest",
    "read_matching_manifest",
    "sha256_file",
    "verify_files",
    "write_manifest",
]

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
TRITON_DIR = "triton"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
#: Model file per ``OnnxConfig.variant``; only fp32 is written by ``flinkai model export``.
VARIANT_FILES: Mapping[str, str] = {
    "fp32": MODEL_FILE,
    "int8": "model.int8.onnx",
    "fp16": "model.fp16.onnx",
}


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output; symbolic dimensions are strings."""

    name: str
    dtype: str
    shape: tuple[str | int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorSpec:
        return cls(str(data["name"]), str(data["dtype"]), tuple(data["shape"]))


@dataclass(frozen=True)
class FileEntry:
    """A file of the artifact folder, by POSIX path relative to the folder."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """Content of ``manifest.json``.

    Attributes:
        name: Model name (also the Triton model name).
        version: Short content hash of ``model.onnx`` (first 12 hex digits of its sha256).
        dim: Embedding width.
        max_seq_length: Tokens per text after truncation (special tokens included).
        inputs: Graph inputs, in the order the runtime feeds them.
        outputs: Graph outputs.
        source: Where the weights came from (``package``, ``version``, ``model``).
        files: Every file of the folder except the manifest.
        created_at: ISO-8601 UTC time of the export.
        opset: ONNX opset of ``model.onnx``.
        format_version: Version of this manifest layout.
    """

    name: str
    version: str
    dim: int
    max_seq_length: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    source: Mapping[str, str]
    files: tuple[FileEntry, ...]
    created_at: str
    opset: int = 17
    format_version: int = FORMAT_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def file(self, path: str) -> FileEntry | None:
        """The entry for ``path`` (POSIX, relative), or None if the export did not write it."""
        return next((f for f in self.files if f.path == path), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "name": self.name,
            "version": self.version,
            "dim": self.dim,
            "max_seq_length": self.max_seq_length,
            "opset": self.opset,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "source": dict(self.source),
            "files": {f.path: {"sha256": f.sha256, "size": f.size} for f in self.files},
            "created_at": self.created_at,
            **dict(self.extra),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = MANIFEST_FILE) -> Manifest:
        """Parse and validate a manifest; raises :class:`ArtifactError` naming ``where``."""
        try:
            fmt = int(data.get("format_version", 0))
            if fmt != FORMAT_VERSION:
                raise ArtifactError(
                    f"{where}: manifest format {fmt} is not supported (expected "
                    f"{FORMAT_VERSION}); {EXPORT_HINT} --force"
                )
            files = tuple(
                FileEntry(str(p), str(e["sha256"]), int(e["size"]))
                for p, e in dict(data["files"]).items()
            )
            known = {
                "format_version", "name", "version", "dim", "max_seq_length", "opset",
                "inputs", "outputs", "source", "files", "created_at",
            }  # fmt: skip
            manifest = cls(
                name=str(data["name"]),
                version=str(data["version"]),
                dim=int(data["dim"]),
                max_seq_length=int(data["max_seq_length"]),
                inputs=tuple(TensorSpec.from_dict(t) for t in data["inputs"]),
                outputs=tuple(TensorSpec.from_dict(t) for t in data["outputs"]),
                source={str(k): str(v) for k, v in dict(data["source"]).items()},
                files=files,
                created_at=str(data["created_at"]),
                opset=int(data["opset"]),
                format_version=fmt,
                extra={k: v for k, v in data.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ArtifactError(f"{where}: invalid manifest ({type(e).__name__}: {e})") from e
        for entry in manifest.files:
            p = PurePosixPath(entry.path)
            # A manifest is data read from disk: never let it point outside its folder.
            if p.is_absolute() or ".." in p.parts or entry.path == MANIFEST_FILE:
                raise ArtifactError(f"{where}: invalid file path {entry.path!r}")
        if manifest.file(MODEL_FILE) is None:
            raise ArtifactError(f"{where}: does not list {MODEL_FILE}")
        return manifest


@dataclass(frozen=True)
class ModelArtifacts:
    """A validated artifact folder.

    Attributes:
        root: The folder.
        manifest: Its parsed manifest.
    """

    root: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def model_version(self) -> str:
        """``<name>@<version>``, written next to every embedding."""
        return f"{self.manifest.name}@{self.manifest.version}"

    @property
    def dim(self) -> int:
        return self.manifest.dim

    @property
    def max_seq_length(self) -> int:
        return self.manifest.max_seq_length

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.manifest.input_names

    @property
    def output_name(self) -> str:
        return self.manifest.outputs[0].name

    @property
    def model_path(self) -> Path:
        """The fp32 ONNX model."""
        return self.root / MODEL_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.root / TOKENIZER_FILE

    @property
    def triton_repository(self) -> Path:
        """Triton model repository root (pass as ``--model-repository``)."""
        return self.root / TRITON_DIR

    @property
    def triton_model_dir(self) -> Path:
        """``triton/<name>``: holds ``config.pbtxt`` and version ``1``."""
        return self.triton_repository / self.manifest.name

    def model_file(self, variant: str = "fp32") -> Path:
        """The ONNX file of one variant (``fp32``, ``int8``, ``fp16``).

        Raises:
            ArtifactError: The variant is unknown or was not exported.
        """
        if variant not in VARIANT_FILES:
            raise ArtifactError(
                f"unknown model variant {variant!r}; known: {sorted(VARIANT_FILES)}"
            )
        rel = VARIANT_FILES[variant]
        if self.manifest.file(rel) is None:
            raise ArtifactError(f"{self.root}: variant {variant!r} ({rel}) has not been exported")
        return self.root / rel


def artifacts_dir(model_config: ModelConfig) -> Path:
    """The artifact folder for a model: ``ModelConfig.dir`` or ``models_dir()/<name>``."""
    return (
        Path(model_config.dir).expanduser()
        if model_config.dir
        else models_dir() / model_config.name
    )


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class _Hasher:
    """Hashes each inode once: the Triton copy of the model is usually a hard link."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], str] = {}

    def __call__(self, path: Path) -> str:
        st = path.stat()
        key = (st.st_dev, st.st_ino)
        if key not in self._seen:
            self._seen[key] = sha256_file(path)
        return self._seen[key]


def _walk(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.relative_to(root).as_posix() != MANIFEST_FILE:
            yield path


def build_manifest(
    root: Path,
    *,
    name: str,
    dim: int,
    max_seq_length: int,
    source: Mapping[str, str],
    opset: int = 17,
    created_at: datetime | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Manifest:
    """Describe every file under ``root`` (which must hold ``model.onnx``).

    Args:
        root: The artifact folder, complete apart from the manifest.
        name: Model name.
        dim: Embedding width.
        max_seq_length: Truncation length of the tokenizer.
        source: Where the weights came from (``package``, ``version``, ``model``).
        opset: ONNX opset of the exported graph.
        created_at: Export time; now (UTC) by default.
        extra: Additional top-level keys (e.g. ``pooling``, ``normalized``).

    Returns:
        The manifest, with ``version`` = first 12 hex digits of ``model.onnx``'s sha256.
    """
    if not (root / MODEL_FILE).is_file():
        raise ArtifactError(f"{root}: {MODEL_FILE} is missing")
    hasher = _Hasher()
    files = tuple(
        FileEntry(p.relative_to(root).as_posix(), hasher(p), p.stat().st_size) for p in _walk(root)
    )
    when = (created_at or datetime.now(UTC)).astimezone(UTC)
    return Manifest(
        name=name,
        version=hasher(root / MODEL_FILE)[:12],
        dim=dim,
        max_seq_length=max_seq_length,
        inputs=tuple(TensorSpec(n, "int64", ("batch", "sequence")) for n in INPUT_NAMES),
        outputs=(TensorSpec(OUTPUT_NAME, "float32", ("batch", dim)),),
        source=dict(source),
        files=files,
        created_at=when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        opset=opset,
        extra=dict(extra or {}),
    )


def write_manifest(root: Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` into ``root`` (atomically, via a rename)."""
    path = root / MANIFEST_FILE
    with staged_file(path, name=f".{MANIFEST_FILE}.tmp") as stage:
        stage.path.write_text(manifest.to_json(), encoding="utf-8")
    return path


def read_manifest(root: Path) -> Manifest:
    """Read and validate ``root/manifest.json``.

    Raises:
        ArtifactError: The folder or manifest is missing, or the manifest is invalid.
    """
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactError(
            f"no model artifacts at {root} ({MANIFEST_FILE} missing); {EXPORT_HINT}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: cannot read manifest ({e}); {EXPORT_HINT} --force") from e
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: manifest must be a JSON object")
    return Manifest.from_dict(data, where=str(path))


def verify_files(root: Path, manifest: Manifest, *, checksums: bool = True) -> None:
    """Check that every file in the manifest exists with the recorded size (and sha256).

    Args:
        root: The artifact folder.
        manifest: Its manifest.
        checksums: Also compare sha256 (reads every file); sizes are always compared.

    Raises:
        ArtifactError: A listed file is missing.
        ChecksumMismatchError: A file's size or sha256 differs; names the file.
    """
    hasher = _Hasher()
    for entry in manifest.files:
        path = root / entry.path
        if not path.is_file():
            raise ArtifactError(f"{path} is missing; {EXPORT_HINT} --force")
        size = path.stat().st_size
        if size != entry.size:
            raise ChecksumMismatchError(path, f"size {size} != {entry.size} in the manifest")
        if checksums:
            digest = hasher(path)
            if digest != entry.sha256:
                raise ChecksumMismatchError(
                    path, f"sha256 {digest[:12]}… != {entry.sha256[:12]}… in the manifest"
                )


def load_artifacts(model_config: ModelConfig, *, verify_checksums: bool = True) -> ModelArtifacts:
    """Locate, validate and describe the exported artifacts for ``model_config``.

    Args:
        model_config: Which model (``name``, ``dir``, ``dim``).
        verify_checksums: Compare sha256 of every file (about 0.2 s for the fp32 model).

    Returns:
        The validated artifacts.

    Raises:
        ArtifactError: Missing folder, manifest or file, or a manifest that does not
            match the config (name or dim); the message says to run ``flinkai model export``.
        ChecksumMismatchError: A file was corrupted or changed; names the file.
    """
    root, manifest = read_matching_manifest(model_config)
    verify_files(root, manifest, checksums=verify_checksums)
    return ModelArtifacts(root=root, manifest=manifest)


def read_matching_manifest(model_config: ModelConfig) -> tuple[Path, Manifest]:
    """The artifact folder and its manifest, checked against the config's name and dim.

    Files are not verified here; callers verify what they will read.
    """
    root = artifacts_dir(model_config)
    manifest = read_manifest(root)
    if manifest.name != model_config.name:
        raise ArtifactError(
            f"{root} holds model {manifest.name!r}, but model.name is {model_config.name!r}"
        )
    if manifest.dim != model_config.dim:
        raise ArtifactError(
            f"{root}: model dim is {manifest.dim}, but model.dim is {model_config.dim}"
        )
    return root, manifest
