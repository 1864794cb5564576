"""The on-disk layout of an exported decoder, its manifest and integrity checks.

``flinkai model export-llm`` writes one folder (``models_dir()/SmolLM2-135M-Instruct``
unless told otherwise)::

    SmolLM2-135M-Instruct/
      manifest.json        model id and version, cache shape, special tokens, stop ids,
                           graph input/output names, source, sha256 + size of each file
      decoder.onnx         fp32 decoder, past_key_values in, present out, last logits
      tokenizer.json       the model's BPE tokenizer
      chat_template.jinja  the model's chat template

Everything the runtime needs is here; it reads no transformers or torch file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flinkai.llm.cache import ModelShape
from flinkai.llm.errors import LlmArtifactError
from flinkai.llm.lora import LoraSpec
from flinkai.paths import models_dir

__all__ = [
    "CHAT_TEMPLATE_FILE",
    "DECODER_FILE",
    "FORMAT_VERSION",
    "GROUPED_ATTENTION",
    "MANIFEST_FILE",
    "MODEL_ID",
    "TOKENIZER_FILE",
    "FileEntry",
    "LlmArtifacts",
    "LlmManifest",
    "default_llm_dir",
    "input_names",
    "load_llm_artifacts",
    "output_names",
    "sha256_file",
]

FORMAT_VERSION = 1
MODEL_ID = "SmolLM2-135M-Instruct"
MANIFEST_FILE = "manifest.json"
DECODER_FILE = "decoder.onnx"
TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
#: ``extra.attention`` of an export whose graph reads each KV head once (the name
#: ``flinkai.models.llm_attention`` registers for the trace; this side imports no torch).
GROUPED_ATTENTION = "flinkai_grouped"


def input_names(n_layers: int, lora: LoraSpec | None = None) -> list[str]:
    """Graph inputs in feed order: ids, mask, positions, key/value per layer, then LoRA."""
    past = [f"past_key_values.{i}.{kind}" for i in range(n_layers) for kind in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids", *past, *(lora.names() if lora else [])]


def output_names(n_layers: int) -> list[str]:
    """Graph outputs: last-position logits, then the key/value per layer covering all tokens."""
    present = [f"present.{i}.{kind}" for i in range(n_layers) for kind in ("key", "value")]
    return ["logits", *present]


def default_llm_dir(model_id: str = MODEL_ID) -> Path:
    """Where ``flinkai model export-llm`` writes by default."""
    return models_dir() / model_id


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class FileEntry:
    """One file of the folder, by name, with its sha256 and size."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class LlmManifest:
    """Content of ``manifest.json``.

    Attributes:
        model_id: Model name, e.g. ``SmolLM2-135M-Instruct``.
        model_version: First 16 hex digits of the decoder's sha256; a cache made by
            one version must not be fed to another.
        shape: Layers, KV heads, head size, dtype and vocabulary of the cache.
        special_tokens: Template variables (``bos_token``, ``eos_token``, ...).
        eos_token_ids: Ids that end a completion (the generation config's ``eos_token_id``).
        bos_token_id: Beginning-of-sequence id from the generation config, if any.
        pad_token_id: Padding id from the generation config, if any.
        max_new_tokens: Default completion budget (see docs/llm.md for its origin).
        max_context: Longest sequence the model was trained for (prompt + completion).
        inputs: Graph input names in feed order.
        outputs: Graph output names.
        opset: ONNX opset of the decoder.
        source: Where the weights came from (package, version, file, sha256, libraries).
        files: Every file of the folder except the manifest.
        created_at: ISO-8601 UTC time of the export.
        format_version: Version of this layout.
        extra: Free notes of the exporter.
        lora: The LoRA inputs of the graph (``export-llm --lora-rank``); None: none.
    """

    model_id: str
    model_version: str
    shape: ModelShape
    special_tokens: Mapping[str, str]
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    pad_token_id: int | None
    max_new_tokens: int
    max_context: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int
    source: Mapping[str, str]
    files: tuple[FileEntry, ...]
    created_at: str
    format_version: int = FORMAT_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)
    lora: LoraSpec | None = None

    @property
    def grouped_attention(self) -> bool:
        """Whether the graph reads each KV head once (older exports copy it per query head)."""
        return self.extra.get("attention") == GROUPED_ATTENTION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        data = asdict(self)
        data["lora"] = None if self.lora is None else self.lora.to_dict()
        data["shape"] = self.shape.cache_fields()
        data["eos_token_ids"] = list(self.eos_token_ids)
        data["inputs"] = list(self.inputs)
        data["outputs"] = list(self.outputs)
        data["files"] = [asdict(f) for f in self.files]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlmManifest:
        """Parse ``manifest.json`` content; raises ``KeyError``/``TypeError``/``ValueError``."""
        if int(data["format_version"]) != FORMAT_VERSION:
            raise ValueError(
                f"format_version {data['format_version']} (this flinkai reads {FORMAT_VERSION})"
            )
        shape = data["shape"]
        return cls(
            model_id=str(data["model_id"]),
            model_version=str(data["model_version"]),
            shape=ModelShape(
                n_layers=int(shape["n_layers"]),
                n_kv_heads=int(shape["n_kv_heads"]),
                head_dim=int(shape["head_dim"]),
                dtype=str(shape["dtype"]),
                vocab_size=int(shape["vocab_size"]),
            ),
            special_tokens={str(k): str(v) for k, v in data["special_tokens"].items()},
            eos_token_ids=tuple(int(i) for i in data["eos_token_ids"]),
            bos_token_id=None if data["bos_token_id"] is None else int(data["bos_token_id"]),
            pad_token_id=None if data["pad_token_id"] is None else int(data["pad_token_id"]),
            max_new_tokens=int(data["max_new_tokens"]),
            max_context=int(data["max_context"]),
            inputs=tuple(str(n) for n in data["inputs"]),
            outputs=tuple(str(n) for n in data["outputs"]),
            opset=int(data["opset"]),
            source={str(k): str(v) for k, v in data["source"].items()},
            files=tuple(
                FileEntry(str(f["path"]), str(f["sha256"]), int(f["size"])) for f in data["files"]
            ),
            created_at=str(data["created_at"]),
            format_version=int(data["format_version"]),
            extra=dict(data.get("extra", {})),
            lora=None if data.get("lora") is None else LoraSpec.from_dict(data["lora"]),
        )

    def write(self, folder: Path) -> Path:
        """Write ``manifest.json`` into ``folder``."""
        path = folder / MANIFEST_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path


@dataclass(frozen=True)
class LlmArtifacts:
    """A checked export folder and its manifest."""

    root: Path
    manifest: LlmManifest

    @property
    def decoder_path(self) -> Path:
        return self.root / DECODER_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.root / TOKENIZER_FILE

    @property
    def chat_template_path(self) -> Path:
        return self.root / CHAT_TEMPLATE_FILE


def _read_manifest(root: Path) -> LlmManifest:
    path = root / MANIFEST_FILE
    if not root.is_dir():
        raise LlmArtifactError(f"no exported decoder at {root}")
    if not path.is_file():
        raise LlmArtifactError(f"{path} is missing: the export is incomplete")
    try:
        return LlmManifest.from_dict(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise LlmArtifactError(f"{path} is unreadable or malformed: {type(e).__name__}: {e}") from e


def _verify(root: Path, manifest: LlmManifest, *, checksums: bool) -> None:
    names = {f.path for f in manifest.files}
    for required in (DECODER_FILE, TOKENIZER_FILE, CHAT_TEMPLATE_FILE):
        if required not in names:
            raise LlmArtifactError(f"{root / MANIFEST_FILE} does not list {required}")
    for entry in manifest.files:
        path = root / entry.path
        if not path.is_file():
            raise LlmArtifactError(f"{path} is missing")
        size = path.stat().st_size
        if size != entry.size:
            raise LlmArtifactError(f"{path}: size {size} != {entry.size} in the manifest")
        if checksums:
            digest = sha256_file(path)
            if digest != entry.sha256:
                raise LlmArtifactError(
                    f"{path}: sha256 {digest[:12]}… != {entry.sha256[:12]}… in the manifest"
                )
            if entry.path == DECODER_FILE and not digest.startswith(manifest.model_version):
                raise LlmArtifactError(
                    f"{path}: model_version {manifest.model_version} is not its sha256 prefix"
                )
    n_layers = manifest.shape.n_layers
    want_in, want_out = input_names(n_layers, manifest.lora), output_names(n_layers)
    if list(manifest.inputs) != want_in or list(manifest.outputs) != want_out:
        raise LlmArtifactError(
            f"{root / MANIFEST_FILE}: graph names do not match a "
            f"{manifest.shape.n_layers}-layer decoder with explicit past_key_values"
        )


def load_llm_artifacts(
    folder: str | Path | None = None, *, verify_checksums: bool = True
) -> LlmArtifacts:
    """Locate and check an export folder.

    Args:
        folder: The export folder; :func:`default_llm_dir` when None.
        verify_checksums: Compare every file's sha256 with the manifest (reads the
            ~0.6 GB decoder once); sizes are always compared.

    Raises:
        LlmArtifactError: Missing folder, manifest or file, malformed manifest, or a
            size/sha256 mismatch; the message says to run ``flinkai model export-llm``.
    """
    root = Path(folder).expanduser().resolve() if folder is not None else default_llm_dir()
    manifest = _read_manifest(root)
    _verify(root, manifest, checksums=verify_checksums)
    return LlmArtifacts(root, manifest)
