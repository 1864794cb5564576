"""The base model a trainer adapts: the very weights of a serving export, with its tokenizer.

An adapter is only valid for the decoder it was trained on (``Adapter.base_model`` is
that export's ``manifest.model_version``). So the trainer starts from the export
folder: its manifest names the model, and the weights come from the same source the
exporter traced (``load_reference()`` de-quantises the SmolLM2 GGUF; the tiny test
model is rebuilt from its seed), and the tokenizer and chat template are the export's
own files, read by the torch-free serving tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkai.finetune.errors import FinetuneError
from flinkai.llm.artifacts import MODEL_ID, LlmManifest, default_llm_dir, load_llm_artifacts
from flinkai.llm.lora import DEFAULT_MODULES
from flinkai.llm.tokenizer import LlmTokenizer

__all__ = ["BaseModel", "default_lora_dir", "load_base", "tiny_from_model_id"]

#: ``TinyLlm.name`` as the tiny export writes it into ``model_id`` (``test/<name>``).
_TINY = re.compile(
    r"^test/tiny-llama-l(?P<layers>\d+)-h(?P<hidden>\d+)-a(?P<heads>\d+)-kv(?P<kv_heads>\d+)"
    r"-i(?P<intermediate>\d+)-s(?P<seed>\d+)-r(?P<init_range>[0-9.eE+-]+)$"
)


@dataclass(frozen=True)
class BaseModel:
    """A base model ready to be adapted.

    Attributes:
        model: The fp32 transformers causal LM (eager attention).
        tokenizer: The export's tokenizer and chat template (what serving renders with).
        manifest: The export's manifest.
        folder: The export folder.
    """

    model: Any
    tokenizer: LlmTokenizer
    manifest: LlmManifest
    folder: Path

    @property
    def model_version(self) -> str:
        """What adapters record as ``base_model``: the export's ``model_version``."""
        return self.manifest.model_version

    @property
    def stop_id(self) -> int:
        """The token that ends an answer (serving's first stop id)."""
        return int(self.manifest.eos_token_ids[0])


def tiny_from_model_id(model_id: str) -> Any:
    """The ``TinyLlm`` whose export has ``model_id``, or None if it is not a tiny export."""
    from flinkai.models.llm_export import TinyLlm

    m = _TINY.match(model_id)
    if m is None:
        return None
    g = m.groupdict()
    tiny = TinyLlm(
        layers=int(g["layers"]),
        hidden=int(g["hidden"]),
        heads=int(g["heads"]),
        kv_heads=int(g["kv_heads"]),
        intermediate=int(g["intermediate"]),
        seed=int(g["seed"]),
        init_range=float(g["init_range"]),
    )
    # The name is rebuilt from the fields: a format change shows here, not as other weights.
    return tiny if f"test/{tiny.name}" == model_id else None


def default_lora_dir(rank: int) -> Path:
    """Where ``flinkai model export-llm --lora-rank R`` writes by default."""
    plain = default_llm_dir()
    return plain.with_name(f"{plain.name}-lora-r{rank}")


def load_base(
    folder: str | Path | None = None,
    rank: int = 8,
    modules: tuple[str, ...] = DEFAULT_MODULES,
) -> BaseModel:
    """The base model of the export in ``folder`` (default: the rank-``rank`` LoRA export).

    The export must take LoRA inputs of ``rank`` on ``modules``: an adapter records its
    export's ``model_version``, and only a decoder with LoRA inputs can serve it.

    Raises:
        LlmArtifactError: The export is missing or damaged.
        FinetuneError: The export takes no adapters of this rank and these modules, or
            its model is neither SmolLM2 nor the tiny test model (whose training
            weights are known).
        MissingDependencyError: torch, transformers or gguf is missing.
    """
    from flinkai.models.llm_export import load_reference, tiny_reference

    # The decoder's sha256 is checked where it is served; hashing 650 MB here buys nothing.
    artifacts = load_llm_artifacts(folder or default_lora_dir(rank), verify_checksums=False)
    manifest = artifacts.manifest
    lora = manifest.lora
    if lora is None or lora.rank != rank or tuple(lora.modules) != tuple(modules):
        have = "no LoRA inputs" if lora is None else f"rank {lora.rank} on {list(lora.modules)}"
        raise FinetuneError(
            f"the export in {artifacts.root} has {have}; adapters of rank {rank} on "
            f"{list(modules)} need one made by `flinkai model export-llm --lora-rank {rank} "
            f"--lora-modules {','.join(modules)}`"
        )
    tiny = tiny_from_model_id(manifest.model_id)
    if manifest.model_id == MODEL_ID:
        model, _ = load_reference()
    elif tiny is not None:
        model, _ = tiny_reference(tiny)
    else:
        raise FinetuneError(
            f"the export in {artifacts.root} is of {manifest.model_id!r}; a trainer knows the "
            f"weights of {MODEL_ID!r} and of the tiny test model only"
        )
    tokenizer = LlmTokenizer(
        artifacts.tokenizer_path,
        artifacts.chat_template_path.read_text(encoding="utf-8"),
        manifest.special_tokens,
    )
    return BaseModel(model, tokenizer, manifest, artifacts.root)
