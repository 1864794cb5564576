"""A prepared GPU check: encoder, decoder and copy figures on one CUDA device, as JSON.

It runs on a machine with torch and transformers but without the project (no Java,
Flink, Kafka, network or model files), so it is self-contained: random weights in the
real model shapes (the same speed as trained ones), AG News sequence lengths from the
committed histogram ``ag_news_lengths.json`` (made by ``make_lengths.py``).

What it measures, each cell after warm-up:

* encoder: an all-MiniLM-L6-v2-shaped ``BertModel`` (6 layers, hidden 384, 12 heads,
  intermediate 1536) in texts/s, fp32/fp16/bf16, batch 32-512, padded to the longest
  text of each batch; the timed step copies ids and mask to the device, runs the model,
  mean-pools, L2-normalises and copies the vectors back (tokenising is excluded);
  texts in arrival order and sorted by length within the round's window;
* decoder: a SmolLM2-135M-shaped ``LlamaForCausalLM`` (30 layers, hidden 576, 9 heads,
  3 KV heads, tied embeddings), batch 1: prefill ms/token and greedy decode ms/token
  at prompts of 256-2,048 tokens;
* host-to-device copy GB/s, pinned and pageable, 1-256 MiB.

Derived: the events/s one slot must feed to keep the GPU busy (the best encoder
texts/s), the KV bytes per token, and per prompt length the restore bandwidth from
which restoring a cached prefix beats recomputing it (bytes per token / prefill
seconds per token).

Usage::

    python benchmarks/gpu/check.py                 # CUDA device; JSON to $OUT or ./
    python benchmarks/gpu/check.py --cpu --out x.json   # reduced sizes, checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CPU_PLAN",
    "DECODER_SHAPE",
    "ENCODER_SHAPE",
    "GPU_PLAN",
    "LengthSampler",
    "NoDeviceError",
    "Plan",
    "break_even_gb_s",
    "derive",
    "kv_bytes_per_token",
    "main",
    "pick_device",
    "round_windows",
]

LENGTHS_FILE = Path(__file__).with_name("ag_news_lengths.json")

#: sentence-transformers/all-MiniLM-L6-v2 (BertModel).
ENCODER_SHAPE: dict[str, Any] = {
    "num_hidden_layers": 6,
    "hidden_size": 384,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}
#: HuggingFaceTB/SmolLM2-135M (LlamaForCausalLM); head size 576 / 9 = 64.
DECODER_SHAPE: dict[str, Any] = {
    "num_hidden_layers": 30,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
}
HEAD_DIM = DECODER_SHAPE["hidden_size"] // DECODER_SHAPE["num_attention_heads"]
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
SECTIONS = ("encoder", "decoder", "copy")


@dataclass(frozen=True)
class Plan:
    """Sizes and repeats of one run.

    Attributes:
        dtypes: Compute dtypes for both models.
        batches: Encoder batch sizes.
        batches_per_round: Encoder batches in one timed round (distinct length draws).
        rounds: Timed rounds per cell (after one untimed warm-up round).
        prompt_tokens: Decoder prompt lengths.
        decode_tokens: Greedy decode steps timed per round.
        decoder_rounds: Timed prefills (and decode loops) per length.
        copy_mib: Host-to-device copy sizes.
        copy_rounds: Timed copies per size.
        budget_s: Cells that would start later than this are skipped, named as such.
    """

    dtypes: tuple[str, ...]
    batches: tuple[int, ...]
    batches_per_round: int
    rounds: int
    prompt_tokens: tuple[int, ...]
    decode_tokens: int
    decoder_rounds: int
    copy_mib: tuple[int, ...]
    copy_rounds: int
    budget_s: float


GPU_PLAN = Plan(
    dtypes=("fp32", "fp16", "bf16"),
    batches=(32, 64, 128, 256, 512),
    batches_per_round=8,
    rounds=10,
    prompt_tokens=(256, 512, 1024, 2048),
    decode_tokens=64,
    decoder_rounds=5,
    copy_mib=(1, 16, 64, 256),
    copy_rounds=10,
    budget_s=420.0,
)
#: Every measurement, small enough for a shared 2-core machine (about 1-2 min).
CPU_PLAN = Plan(
    dtypes=("fp32", "fp16", "bf16"),
    batches=(2, 4),
    batches_per_round=2,
    rounds=1,
    prompt_tokens=(16, 32),
    decode_tokens=2,
    decoder_rounds=1,
    copy_mib=(1, 16),
    copy_rounds=3,
    budget_s=600.0,
)


class NoDeviceError(RuntimeError):
    """No CUDA device and ``--cpu`` not given."""


# -- pure helpers (no torch) ---------------------------------------------------------


class LengthSampler:
    """Token lengths drawn from a ``{length: count}`` histogram, capped at the model's limit.

    Args:
        histogram: Token length -> number of texts of that length.
        max_seq_length: Lengths above it are cut to it, as the embedder truncates.
    """

    def __init__(self, histogram: dict[int, int], max_seq_length: int) -> None:
        if not histogram:
            raise ValueError("empty length histogram")
        for length, count in histogram.items():
            if length < 1 or count < 0:
                raise ValueError(f"bad histogram entry {length}: {count}")
        if sum(histogram.values()) < 1:
            raise ValueError("length histogram holds no texts")
        self.max_seq_length = max_seq_length
        self._values = [min(n, max_seq_length) for n in sorted(histogram)]
        self._weights = [histogram[n] for n in sorted(histogram)]

    @classmethod
    def from_file(cls, path: Path = LENGTHS_FILE) -> LengthSampler:
        """The histogram ``make_lengths.py`` wrote."""
        doc = json.loads(path.read_text())
        histogram = {int(k): int(v) for k, v in doc["histogram"].items()}
        return cls(histogram, int(doc["max_seq_length"]))

    def sample(self, n: int, seed: int) -> list[int]:
        """``n`` lengths; the same seed gives the same draw."""
        return random.Random(seed).choices(self._values, self._weights, k=n)

    def mean(self) -> float:
        """Mean length after the cap."""
        total = sum(self._weights)
        return sum(v * w for v, w in zip(self._values, self._weights, strict=True)) / total


def round_windows(lengths: Sequence[int], batch: int, order: str) -> list[list[int]]:
    """Cut one round's lengths into batches: in arrival order, or sorted by length first.

    ``sorted`` is what a slot can do within the window it holds (one bundle); each batch
    is then padded to its own longest text.
    """
    if order not in ("arrival", "sorted"):
        raise ValueError(f"unknown order {order!r}")
    if batch < 1 or len(lengths) % batch:
        raise ValueError(f"{len(lengths)} lengths do not cut into batches of {batch}")
    seq = sorted(lengths) if order == "sorted" else list(lengths)
    return [seq[i : i + batch] for i in range(0, len(seq), batch)]


def padded_fraction(batches: Sequence[Sequence[int]]) -> float:
    """Share of the computed positions that are padding."""
    real = sum(sum(b) for b in batches)
    padded = sum(max(b) * len(b) for b in batches)
    return 1.0 - real / padded


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, value_bytes: int) -> int:
    """Bytes of the KV cache per token: K and V for every layer and KV head."""
    return layers * kv_heads * head_dim * 2 * value_bytes


def break_even_gb_s(bytes_per_token: int, prefill_ms_per_token: float) -> float:
    """Restore bandwidth (GB/s, 1e9) at which restoring a prefix takes as long as prefill."""
    if prefill_ms_per_token <= 0:
        raise ValueError("prefill time per token must be positive")
    return bytes_per_token / (prefill_ms_per_token / 1000.0) / 1e9


def pick_device(want_cpu: bool, cuda_available: bool) -> str:
    """``cpu`` when asked for, else ``cuda``; no silent fallback to the CPU."""
    if want_cpu:
        return "cpu"
    if not cuda_available:
        raise NoDeviceError(
            "no CUDA device visible to torch: this check is for a GPU machine; "
            "run with --cpu to check the script itself on CPU (reduced sizes)"
        )
    return "cuda"


def summarize(ms: Sequence[float]) -> dict[str, float | int]:
    """Median and best of the timed repeats."""
    return {"median_ms": statistics.median(ms), "best_ms": min(ms), "n": len(ms)}


def _nearest(rows: Sequence[dict[str, Any]], mib: float) -> dict[str, Any] | None:
    usable = [r for r in rows if r.get("gb_s_median") is not None]
    return min(usable, key=lambda r: abs(r["mib"] - mib)) if usable else None


def derive(result: dict[str, Any]) -> dict[str, Any]:
    """The slot rate and the KV break-even, from the measured rows only."""
    enc = [r for r in result["encoder"]["rows"] if r.get("texts_per_s_median") is not None]
    slot: dict[str, Any] = {"texts_per_s": None}
    if enc:
        best = max(enc, key=lambda r: r["texts_per_s_median"])
        per_dtype = {}
        for dtype in dict.fromkeys(r["dtype"] for r in enc):
            top = max(
                (r for r in enc if r["dtype"] == dtype), key=lambda r: r["texts_per_s_median"]
            )
            per_dtype[dtype] = {k: top[k] for k in ("texts_per_s_median", "batch", "order")}
        slot = {
            "texts_per_s": best["texts_per_s_median"],
            "dtype": best["dtype"],
            "batch": best["batch"],
            "order": best["order"],
            "per_dtype": per_dtype,
        }
    slot["meaning"] = (
        "events/s one slot must deliver (tokenised) to keep the encoder busy: the best "
        "median encoder texts/s over dtype, batch and order"
    )
    layers, kv_heads = DECODER_SHAPE["num_hidden_layers"], DECODER_SHAPE["num_key_value_heads"]
    per_token = {
        name: kv_bytes_per_token(layers, kv_heads, HEAD_DIM, size)
        for name, size in (("fp16", 2), ("fp32", 4))
    }
    copies = [r for r in result["copy"]["rows"] if r["pinned"]]
    rows = []
    for r in result["decoder"]["rows"]:
        if r.get("prefill_ms_per_token") is None:
            continue
        kv_bytes = kv_bytes_per_token(layers, kv_heads, HEAD_DIM, DTYPE_BYTES[r["dtype"]])
        prefix_mb = kv_bytes * r["prompt_tokens"] / 1e6
        need = break_even_gb_s(kv_bytes, r["prefill_ms_per_token"])
        copy = _nearest(copies, prefix_mb * 1e6 / 2**20)
        rows.append(
            {
                "prompt_tokens": r["prompt_tokens"],
                "compute_dtype": r["dtype"],
                "kv_bytes_per_token": kv_bytes,
                "prefix_mb": round(prefix_mb, 3),
                "prefill_ms_per_token": r["prefill_ms_per_token"],
                "restore_gb_s_break_even": need,
                "pinned_copy_gb_s": None if copy is None else copy["gb_s_median"],
                "pinned_copy_mib": None if copy is None else copy["mib"],
                "pinned_copy_beats_recompute": None if copy is None else copy["gb_s_median"] > need,
            }
        )
    return {
        "slot_events_per_s": slot,
        "kv_cache": {
            "shape": {"layers": layers, "kv_heads": kv_heads, "head_dim": HEAD_DIM},
            "bytes_per_token": per_token,
            "break_even": rows,
            "meaning": "restoring a prefix beats recomputing it when the store delivers more "
            "than restore_gb_s_break_even (= kv_bytes_per_token / prefill seconds per token, "
            "the prefill average at that prompt length); pinned_copy_gb_s is the host-to-"
            "device copy alone at the measured size nearest the prefix, an upper bound for "
            "a restore from host memory",
        },
    }


# -- measurement (torch) -------------------------------------------------------------


class _Timer:
    """Milliseconds of a callable: CUDA events on a GPU, ``perf_counter`` on the CPU."""

    def __init__(self, torch: Any, device: str) -> None:
        self._torch = torch
        self._cuda = device == "cuda"

    def ms(self, fn: Callable[[], object]) -> float:
        if self._cuda:
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            self._torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1000.0


class _Budget:
    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self._deadline


def _dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _encoder_batches(
    torch: Any, batches: list[list[int]], vocab: int, seed: int, pin: bool
) -> list[tuple[Any, Any]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for lengths in batches:
        width = max(lengths)
        ids = torch.randint(1000, vocab, (len(lengths), width), generator=gen)
        mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
        ids = ids * mask
        if pin:
            ids, mask = ids.pin_memory(), mask.pin_memory()
        out.append((ids, mask))
    return out


def measure_encoder(
    torch: Any, device: str, plan: Plan, sampler: LengthSampler, budget: _Budget
) -> dict[str, Any]:
    """Texts/s per dtype, batch and order."""
    from transformers import BertConfig, BertModel

    timer = _Timer(torch, device)
    config = BertConfig(**{**ENCODER_SHAPE, "attn_implementation": "sdpa"})
    model: Any = BertModel(config, add_pooling_layer=False)
    model = model.to(device).eval()
    rows: list[dict[str, Any]] = []
    for dtype in plan.dtypes:
        model = model.to(_dtype(torch, dtype))
        for batch in plan.batches:
            lengths = sampler.sample(batch * plan.batches_per_round, seed=batch)
            for order in ("arrival", "sorted"):
                row: dict[str, Any] = {"dtype": dtype, "batch": batch, "order": order}
                rows.append(row)
                if budget.spent():
                    row["skipped"] = "time budget spent"
                    continue
                shaped = round_windows(lengths, batch, order)
                data = _encoder_batches(
                    torch, shaped, ENCODER_SHAPE["vocab_size"], batch, device == "cuda"
                )

                def one_round(data: list[tuple[Any, Any]] = data, model: Any = model) -> None:
                    for ids, mask in data:
                        ids_d = ids.to(device, non_blocking=True)
                        mask_d = mask.to(device, non_blocking=True)
                        hidden = model(input_ids=ids_d, attention_mask=mask_d).last_hidden_state
                        m = mask_d.unsqueeze(-1).to(hidden.dtype)
                        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
                        vectors = torch.nn.functional.normalize(pooled.float(), dim=-1)
                        vectors.cpu()

                try:
                    with torch.inference_mode():
                        one_round()  # warm-up: kernels, allocator, this round's shapes
                        times = [timer.ms(one_round) for _ in range(plan.rounds)]
                except RuntimeError as e:  # OOM or an unsupported kernel: say so, go on
                    row["error"] = f"{type(e).__name__}: {e}"[:300]
                    continue
                texts = batch * plan.batches_per_round
                stats = summarize(times)
                row.update(
                    texts_per_s_median=texts / (stats["median_ms"] / 1000.0),
                    texts_per_s_best=texts / (stats["best_ms"] / 1000.0),
                    ms_per_batch_median=stats["median_ms"] / plan.batches_per_round,
                    tokens_per_text_mean=sum(lengths) / len(lengths),
                    padded_fraction=padded_fraction(shaped),
                    rounds=stats["n"],
                )
                print(
                    f"encoder {dtype} batch {batch:>4} {order:>7}: "
                    f"{row['texts_per_s_median']:>10.0f} texts/s",
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "config": {**ENCODER_SHAPE, "attn_implementation": config._attn_implementation},
        "lengths": {
            "file": LENGTHS_FILE.name,
            "mean_tokens": sampler.mean(),
            "max_seq_length": sampler.max_seq_length,
        },
        "batches_per_round": plan.batches_per_round,
        "step": "ids+mask host->device (pinned on CUDA), model, mean pool, L2 normalise, "
        "vectors device->host; no tokenising",
        "rows": rows,
    }


def measure_decoder(torch: Any, device: str, plan: Plan, budget: _Budget) -> dict[str, Any]:
    """Prefill and decode ms/token per dtype and prompt length (batch 1)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    timer = _Timer(torch, device)
    config = LlamaConfig(**{**DECODER_SHAPE, "attn_implementation": "sdpa"})
    with torch.device(device):
        model: Any = LlamaForCausalLM(config).eval()
    vocab = DECODER_SHAPE["vocab_size"]
    rows: list[dict[str, Any]] = []
    for dtype in plan.dtypes:
        model = model.to(_dtype(torch, dtype))
        for length in plan.prompt_tokens:
            row: dict[str, Any] = {"dtype": dtype, "prompt_tokens": length}
            rows.append(row)
            if budget.spent():
                row["skipped"] = "time budget spent"
                continue
            gen = torch.Generator().manual_seed(length)
            ids = torch.randint(0, vocab, (1, length), generator=gen).to(device)
            state: dict[str, Any] = {}

            def prefill(ids: Any = ids, state: dict[str, Any] = state, model: Any = model) -> None:
                state["out"] = model(input_ids=ids, use_cache=True, logits_to_keep=1)

            def decode(state: dict[str, Any] = state, model: Any = model) -> None:
                out = state["out"]
                for _ in range(plan.decode_tokens):
                    token = out.logits[:, -1:].argmax(-1)
                    out = model(
                        input_ids=token,
                        past_key_values=out.past_key_values,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                state["out"] = out

            try:
                with torch.inference_mode():
                    prefill()  # warm-up at this length
                    decode()
                    prefill_ms = [timer.ms(prefill) for _ in range(plan.decoder_rounds)]
                    decode_ms = []
                    for _ in range(plan.decoder_rounds):
                        prefill()
                        decode_ms.append(timer.ms(decode))
            except RuntimeError as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                continue
            state.clear()
            pre, dec = summarize(prefill_ms), summarize(decode_ms)
            row.update(
                prefill_ms_median=pre["median_ms"],
                prefill_ms_best=pre["best_ms"],
                prefill_ms_per_token=pre["median_ms"] / length,
                prefill_tokens_per_ms=length / pre["median_ms"],
                decode_ms_per_token=dec["median_ms"] / plan.decode_tokens,
                decode_ms_per_token_best=dec["best_ms"] / plan.decode_tokens,
                decode_tokens=plan.decode_tokens,
                rounds=pre["n"],
            )
            print(
                f"decoder {dtype} {length:>5} tokens: prefill {row['prefill_ms_median']:.2f} ms "
                f"({row['prefill_ms_per_token']:.4f} ms/token), decode "
                f"{row['decode_ms_per_token']:.2f} ms/token",
                file=sys.stderr,
                flush=True,
            )
    return {
        "config": {**DECODER_SHAPE, "head_dim": HEAD_DIM, "attn_implementation": "sdpa"},
        "step": "batch 1; prefill = one forward over the prompt with use_cache and the last "
        "logits; decode = greedy steps on the returned cache (argmax on the device)",
        "rows": rows,
    }


def measure_copy(torch: Any, device: str, plan: Plan, budget: _Budget) -> dict[str, Any]:
    """Host-to-device copy GB/s, pinned and pageable."""
    timer = _Timer(torch, device)
    rows: list[dict[str, Any]] = []
    for mib in plan.copy_mib:
        for pinned in (True, False):
            row: dict[str, Any] = {"mib": mib, "pinned": pinned, "gb_s_median": None}
            rows.append(row)
            if pinned and device != "cuda":
                row["skipped"] = "pinned host memory needs CUDA"
                continue
            if budget.spent():
                row["skipped"] = "time budget spent"
                continue
            n = mib * 2**20
            src = torch.ones(n, dtype=torch.uint8, pin_memory=pinned)
            dst = torch.empty(n, dtype=torch.uint8, device=device)

            def copy(src: Any = src, dst: Any = dst, pinned: bool = pinned) -> None:
                dst.copy_(src, non_blocking=pinned)

            copy()
            copy()
            stats = summarize([timer.ms(copy) for _ in range(plan.copy_rounds)])
            row.update(
                gb_s_median=n / 1e9 / (stats["median_ms"] / 1000.0),
                gb_s_best=n / 1e9 / (stats["best_ms"] / 1000.0),
                rounds=stats["n"],
            )
            del src, dst
    return {
        "direction": "host to device" if device == "cuda" else "host to host (no device)",
        "rows": rows,
    }


# -- the run -------------------------------------------------------------------------


def _versions(torch: Any) -> dict[str, Any]:
    import numpy
    import transformers

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
    }
    return out


def _device_info(torch: Any, device: str) -> dict[str, Any]:
    if device != "cuda":
        return {"name": _cpu_name(), "threads": torch.get_num_threads()}
    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_total_gib": props.total_memory / 2**30,
        "multiprocessors": props.multi_processor_count,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
    }
    try:  # nvidia-ml-py: driver version; optional
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        info["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except (ImportError, OSError, RuntimeError) as e:
        info["driver"] = f"unknown ({type(e).__name__})"
    except Exception as e:  # pynvml.NVMLError derives from Exception only
        info["driver"] = f"unknown ({e})"
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _default_out() -> Path:
    base = os.environ.get("OUT")
    return Path(base) / "gpu-check.json" if base else Path("gpu-check.json")


def _save(path: Path, result: dict[str, Any]) -> None:
    # Written after every section, so a run cut short still leaves what it measured.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU, reduced sizes")
    parser.add_argument("--out", type=Path, help="JSON path ($OUT/gpu-check.json or ./)")
    parser.add_argument("--budget-s", type=float, help="skip cells starting after this many s")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (all)",
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown or not chosen:
        parser.error(f"--sections: unknown {unknown}; choose from {','.join(SECTIONS)}")
    try:
        device = pick_device(args.cpu, _cuda_available())
    except NoDeviceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import warnings

    import torch

    # transformers 5.2x renames ``past_key_values``; the old name still works there and is
    # the only one older 5.x releases (the GPU machine's) know.
    warnings.filterwarnings(
        "ignore", message=".*past_key_values.*deprecated", category=FutureWarning
    )
    plan = CPU_PLAN if device == "cpu" else GPU_PLAN
    if args.budget_s is not None:
        plan = Plan(**{**asdict(plan), "budget_s": args.budget_s})
    out = args.out or _default_out()
    started = time.time()
    budget = _Budget(plan.budget_s)
    sampler = LengthSampler.from_file()
    result: dict[str, Any] = {
        "check": "benchmarks/gpu/check.py",
        "device": device,
        "device_info": _device_info(torch, device),
        "versions": _versions(torch),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "plan": asdict(plan),
        "timing": {
            "method": "CUDA events around each timed call, after a device synchronize"
            if device == "cuda"
            else "time.perf_counter around each timed call",
            "warm_up": "one untimed call per cell (encoder: one round), excluded",
            "statistic": "median of the timed repeats (best also kept); rates from the median",
            "mode": "torch eager, inference_mode, sdpa attention, no torch.compile or CUDA graphs",
        },
        "started_unix": started,
        "encoder": {"rows": []},
        "decoder": {"rows": []},
        "copy": {"rows": []},
    }
    sections: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
        ("encoder", lambda: measure_encoder(torch, device, plan, sampler, budget)),
        ("decoder", lambda: measure_decoder(torch, device, plan, budget)),
        ("copy", lambda: measure_copy(torch, device, plan, budget)),
    )
    for name, run in sections:
        if name not in chosen:
            result[name]["skipped"] = "not chosen (--sections)"
            continue
        result[name] = run()
        if device == "cuda":
            torch.cuda.empty_cache()
        result["seconds"] = time.time() - started
        _save(out, result)
    result["derived"] = derive(result)
    result["seconds"] = time.time() - started
    _save(out, result)
    slot = result["derived"]["slot_events_per_s"]
    print(f"wrote {out} in {result['seconds']:.0f} s; slot must feed {slot['texts_per_s']} texts/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
