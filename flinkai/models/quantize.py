"""``flinkai model quantize``: the exported fp32 model → a verified int8 or fp16 variant.

Writes ``model.int8.onnx`` (or, with ``precision="fp16"``, ``model.fp16.onnx``) next to
``model.onnx`` and lists it in the manifest, so ``OnnxEmbeddingBackend`` with
``onnx.variant: int8`` (``fp16``) loads it and checks its sha256.
Before anything is installed, the quantised model is compared with fp32 on held-out
texts (AG News when available, else the export's sample sentences) and refused if
the mean cosine is below a threshold: a fast model that embeds differently would
silently break every nearest-neighbour lookup built on the fp32 vectors.

Why the default is dynamic, per-channel, MatMul-only: naive dynamic quantisation
(per-tensor, every op including the embedding ``Gather``) loses too much (mean
cosine about 0.96 on AG News). Per-channel scales on the weight MatMuls keep the
mean cosine above 0.99; leaving the embedding tables in fp32 costs model size, not
speed. Measured on 400 held-out AG News texts (2 threads, length-sorted, ratios
to fp32 from one interleaved run): per-channel MatMul 0.9927 mean / 0.9837 min
cosine, 1.37-1.53x; adding ``exclude=("ffn-output",)`` 0.9961 / 0.9924, 1.47-1.48x;
static QDQ with MinMax calibration only 0.928 mean, so it is opt-in
(``method="static"``).

fp16 uses onnxruntime's own converter (``onnxruntime.transformers.float16``, no extra
dependency) with ``keep_io_types``: inputs stay int64 and the output fp32, so the
backend's feeds and outputs do not change. It is meant for GPUs; on CPU it is no
faster (``flinkai bench embed`` measures both).
"""

from __future__ import annotations

import fnmatch
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from flinkai.config import ModelConfig
from flinkai.models.artifacts import (
    VARIANT_FILES,
    FileEntry,
    ModelArtifacts,
    load_artifacts,
    sha256_file,
    write_manifest,
)
from flinkai.models.checks import embed_with, raw_session
from flinkai.models.errors import QuantizeError
from flinkai.staging import staged_file

__all__ = [
    "ATTENTION_SCORE_NODES",
    "DEFAULT_MIN_COSINE",
    "QuantizeOptions",
    "QuantizeResult",
    "evaluation_split",
    "quantize_model",
]

log = logging.getLogger(__name__)

#: Refuse to install a variant whose mean cosine to fp32 on held-out texts is lower.
DEFAULT_MIN_COSINE = 0.99
#: The two activation-by-activation MatMuls of every attention block (QKᵀ and
#: softmax·V): their inputs have no fixed range, so int8 there costs accuracy.
ATTENTION_SCORE_NODES: tuple[str, ...] = ("*/attention/self/MatMul", "*/attention/self/MatMul_1")
#: Shorthands accepted by ``--exclude`` next to node names and glob patterns.
EXCLUDE_PRESETS: dict[str, tuple[str, ...]] = {
    "attention-scores": ATTENTION_SCORE_NODES,
    "ffn-output": ("*/layer.?/output/dense/MatMul",),  # not attention/output
    "first-layer": ("*/layer.0/*",),
    "last-layer": ("*/layer.5/*",),
}
_SEED = 0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantise, and how strictly to check the result.

    Attributes:
        precision: ``int8`` (quantise) or ``fp16`` (convert weights and compute to
            half precision; the quantisation options below do not apply).
        method: ``dynamic`` (activation ranges computed per batch at run time) or
            ``static`` (QDQ with ranges calibrated on AG News texts).
        per_channel: One weight scale per output channel instead of per tensor.
        reduce_range: 7-bit weights; avoids int16 saturation on CPUs without VNNI,
            at a large accuracy cost with per-tensor scales.
        op_types: Op types to quantise (``MatMul`` only keeps embedding tables fp32).
        exclude: MatMul node names, glob patterns or presets (``attention-scores``,
            ``ffn-output``, ``first-layer``, ``last-layer``) to keep in fp32.
        calibration_texts: Texts for static calibration, disjoint from evaluation.
        eval_texts: Held-out texts the result is compared on.
        min_cosine: Refuse when the mean cosine to fp32 is below this.
        force: Install even when below ``min_cosine``.
    """

    precision: Literal["int8", "fp16"] = "int8"
    method: Literal["dynamic", "static"] = "dynamic"
    per_channel: bool = True
    reduce_range: bool = False
    op_types: tuple[str, ...] = ("MatMul",)
    exclude: tuple[str, ...] = ()
    calibration_texts: int = 256
    eval_texts: int = 300
    min_cosine: float = DEFAULT_MIN_COSINE
    force: bool = False

    def describe(self) -> dict[str, Any]:
        """JSON-friendly summary, stored in the manifest next to the file."""
        if self.precision == "fp16":
            return {"precision": "fp16", "converter": "onnxruntime float16", "keep_io_types": True}
        out: dict[str, Any] = {
            "method": self.method,
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
            "op_types": list(self.op_types),
            "exclude": list(self.exclude),
        }
        if self.method == "static":
            out["calibration_texts"] = self.calibration_texts
        return out


@dataclass(frozen=True)
class QuantizeResult:
    """What :func:`quantize_model` did.

    Attributes:
        path: The installed ``model.int8.onnx`` or ``model.fp16.onnx``.
        mean_cosine: Mean cosine to fp32 over the held-out texts.
        min_cosine: Lowest cosine over the held-out texts.
        eval_texts: How many texts were compared.
        text_source: ``ag_news`` or ``samples``.
        size_bytes: Size of the quantised file.
        excluded_nodes: Nodes kept in fp32.
        seconds: Wall time of the whole call.
        below_threshold: Installed with ``force`` despite a low mean cosine.
    """

    path: Path
    mean_cosine: float
    min_cosine: float
    eval_texts: int
    text_source: str
    size_bytes: int
    excluded_nodes: tuple[str, ...]
    seconds: float
    below_threshold: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)


def evaluation_split(
    texts: Sequence[str], eval_n: int, calibration_n: int
) -> tuple[list[str], list[str]]:
    """Shuffle (fixed seed) and split into disjoint evaluation and calibration texts.

    Calibrating on the texts the model is judged on would flatter static quantisation.
    """
    order = list(range(len(texts)))
    random.Random(_SEED).shuffle(order)
    evaluation = [texts[i] for i in order[:eval_n]]
    calibration = [texts[i] for i in order[eval_n : eval_n + calibration_n]]
    return evaluation, calibration


def _default_texts() -> tuple[list[str], str]:
    from flinkai.datasets import DatasetNotFoundError, load_ag_news

    try:
        return [t for _, t in load_ag_news()], "ag_news"
    except DatasetNotFoundError as e:
        log.warning("%s; comparing on the export's sample sentences instead", e)
    from flinkai.models.export import SAMPLE_SENTENCES

    return list(SAMPLE_SENTENCES), "samples"


def _resolve_exclude(model_path: Path, patterns: Sequence[str]) -> tuple[str, ...]:
    import onnx

    expanded = [p for pat in patterns for p in EXCLUDE_PRESETS.get(pat, (pat,))]
    names = [n.name for n in onnx.load(str(model_path), load_external_data=False).graph.node]
    chosen = tuple(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in expanded))
    unmatched = [p for p in expanded if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        # A typo would otherwise quantise what the caller meant to keep.
        raise QuantizeError(f"--exclude pattern(s) {unmatched} match no node of {model_path}")
    return chosen


class _CalibrationReader:
    """Feeds length-sorted, per-batch padded calibration batches to ``quantize_static``.

    Dynamic shapes are fine for MinMax calibration: it only tracks each tensor's range.
    """

    def __init__(self, tokenizer: Any, texts: Sequence[str], batch_size: int = 16) -> None:
        from flinkai.models.tokens import plan_sub_batches

        self._batches: Iterator[dict[str, np.ndarray]] = (
            sub.feed for sub in plan_sub_batches(tokenizer, texts, batch_size, True)
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def _quantize(
    src: Path,
    dst: Path,
    options: QuantizeOptions,
    exclude: Sequence[str],
    tokenizer: Any,
    calibration: Sequence[str],
) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    common: dict[str, Any] = {
        "per_channel": options.per_channel,
        "reduce_range": options.reduce_range,
        "op_types_to_quantize": list(options.op_types),
        "nodes_to_exclude": list(exclude),
        "weight_type": QuantType.QInt8,
    }
    if options.method == "dynamic":
        quantize_dynamic(src, dst, **common)
        return
    if not calibration:
        raise QuantizeError("static quantisation needs calibration texts (--calibration-texts)")

    class Reader(_CalibrationReader, CalibrationDataReader):  # ORT checks the base class
        pass

    quantize_static(
        src,
        dst,
        Reader(tokenizer, calibration),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        calibrate_method=CalibrationMethod.MinMax,
        **common,
    )


def _to_fp16(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # keep_io_types: int64 ids in, fp32 embedding out, as the fp32 model; casts go inside.
    converted = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(converted, str(dst))


def quantize_model(
    model_config: ModelConfig | None = None,
    options: QuantizeOptions | None = None,
    *,
    texts: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> QuantizeResult:
    """Quantise the exported model to int8 (or fp16), verify it against fp32, install it.

    Args:
        model_config: Which artifacts (``ModelConfig.dir`` or the default folder).
        options: Method and acceptance threshold; defaults to :class:`QuantizeOptions`.
        texts: Texts to split into evaluation and calibration sets; AG News by default
            (the export's sample sentences when the data set is absent).
        progress: Called with one line per step; defaults to the module logger.

    Returns:
        Where the model went and how close it is to fp32.

    Raises:
        ArtifactError: The fp32 artifacts are missing or corrupted.
        QuantizeError: Quantisation failed, or the mean cosine is below
            ``options.min_cosine`` and ``options.force`` is not set. The previous
            variant file (if any) and the manifest are left untouched.
    """
    from flinkai.models.tokens import load_tokenizer

    options = options or QuantizeOptions()
    say = progress or log.info
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    artifacts = load_artifacts(model_config or ModelConfig())
    src = artifacts.model_path
    if texts is None:
        all_texts, source = _default_texts()
    else:
        all_texts, source = list(texts), "given"
    evaluation, calibration = evaluation_split(
        all_texts,
        options.eval_texts,
        options.calibration_texts if options.method == "static" else 0,
    )
    if not evaluation:
        raise QuantizeError("no evaluation texts")
    fp16 = options.precision == "fp16"
    exclude = () if fp16 else _resolve_exclude(src, options.exclude)
    tokenizer = load_tokenizer(artifacts.tokenizer_path, artifacts.max_seq_length)
    target = artifacts.root / VARIANT_FILES[options.precision]

    # Built beside the target and renamed over it only once it is accurate enough.
    with staged_file(target) as stage:
        tmp = stage.path
        t0 = time.perf_counter()
        say(
            f"converting {src.name} to fp16 (inputs and output kept as they are)"
            if fp16
            else f"quantising {src.name} ({options.method}, "
            f"{'per-channel' if options.per_channel else 'per-tensor'}, "
            f"{len(exclude)} node(s) kept in fp32"
            + (f", calibrating on {len(calibration)} texts" if calibration else "")
            + ")"
        )
        try:
            if fp16:
                _to_fp16(src, tmp)
            else:
                _quantize(src, tmp, options, exclude, tokenizer, calibration)
        except QuantizeError:
            raise
        except Exception as e:  # onnxruntime.quantization raises bare Exceptions
            raise QuantizeError(f"quantisation of {src} failed: {type(e).__name__}: {e}") from e
        timings["quantize"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        say(f"comparing with fp32 on {len(evaluation)} held-out {source} texts")
        mean_cos, min_cos = _compare(artifacts, src, tmp, tokenizer, evaluation)
        timings["evaluate"] = time.perf_counter() - t0
        say(f"cosine to fp32: mean {mean_cos:.4f}, min {min_cos:.4f}")
        below = mean_cos < options.min_cosine
        if below and not options.force:
            raise QuantizeError(
                f"mean cosine {mean_cos:.4f} (min {min_cos:.4f}) to fp32 is below "
                f"{options.min_cosine}; not installed (try --per-channel, --exclude "
                "attention-scores or --method static; --force installs it anyway)"
            )

    size = target.stat().st_size
    _register(
        artifacts,
        target,
        options.precision,
        {
            **options.describe(),
            "excluded_nodes": len(exclude),
            "mean_cosine": round(mean_cos, 5),
            "min_cosine": round(min_cos, 5),
            "eval_texts": len(evaluation),
            "eval_source": source,
        },
    )
    seconds = time.perf_counter() - t_start
    say(f"installed {target} ({size / 1e6:.1f} MB) in {seconds:.1f}s")
    return QuantizeResult(
        path=target,
        mean_cosine=mean_cos,
        min_cosine=min_cos,
        eval_texts=len(evaluation),
        text_source=source,
        size_bytes=size,
        excluded_nodes=exclude,
        seconds=seconds,
        below_threshold=below,
        timings_s=timings,
    )


def _compare(
    artifacts: ModelArtifacts, fp32: Path, variant: Path, tokenizer: Any, texts: Sequence[str]
) -> tuple[float, float]:
    try:
        quantised = raw_session(variant)
    except Exception as e:  # onnxruntime's errors share no base class but Exception
        raise QuantizeError(f"the quantised model does not load: {e}") from e
    reference = embed_with(raw_session(fp32), tokenizer, texts, artifacts.output_name)
    vectors = embed_with(quantised, tokenizer, texts, artifacts.output_name)
    # Rows are L2-normalised in the graph; normalise again so the check does not rely on it.
    ref = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    got = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosine = (ref * got).sum(axis=1)
    return float(cosine.mean()), float(cosine.min())


def _register(artifacts: ModelArtifacts, path: Path, variant: str, info: dict[str, Any]) -> None:
    """Add (or replace) the variant's entry in the manifest, with its sha256."""
    rel = path.relative_to(artifacts.root).as_posix()
    manifest = artifacts.manifest
    entry = FileEntry(rel, sha256_file(path), path.stat().st_size)
    files = tuple(
        sorted((*(f for f in manifest.files if f.path != rel), entry), key=lambda f: f.path)
    )
    variants = dict(manifest.extra.get("variants", {}))
    variants[variant] = {"file": rel, **info}
    write_manifest(
        artifacts.root,
        replace(manifest, files=files, extra={**manifest.extra, "variants": variants}),
    )
