"""``flinkai bench llm``: prefill and decode latency of the exported SmolLM2 decoder.

For each prompt length the ONNX decoder prefills a prompt of that many tokens (AG
News text, chat-templated, cut to length), then decodes a few tokens on that cache;
torch (transformers, fp32, the export's source) prefills the very same ids with the
same thread count, so the ratio is like for like. Single runs after one warm-up call:
the figures are indicative on a shared machine, and the JSON records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["LlmBenchRow", "register", "run_llm_bench"]

DEFAULT_LENGTHS = (128, 512, 1024, 2048)
#: ``OnnxDecoder`` opens its session on the CPU provider only; the torch reference too.
DECODER_PATH = "the SmolLM2 decoder (ONNX Runtime CPU provider; torch reference on CPU)"


@dataclass(frozen=True)
class LlmBenchRow:
    """Figures for one prompt length (milliseconds unless named otherwise)."""

    prompt_tokens: int
    ort_prefill_ms: float
    ort_decode_ms_per_token: float
    decode_tokens: int
    torch_prefill_ms: float | None
    torch_over_ort: float | None
    kv_cache_mb: float


def _prompt_ids(tokenizer: Any, length: int) -> list[int]:
    from flinkai.datasets import load_ag_news

    texts = [text for _, text in load_ag_news(limit=400)]
    body = "\n".join(texts)
    ids: list[int] = tokenizer.apply_chat_template([{"role": "user", "content": body}])
    if len(ids) < length:
        raise ValueError(f"AG News gave {len(ids)} tokens, fewer than {length}")
    return ids[:length]


def run_llm_bench(
    lengths: tuple[int, ...] = DEFAULT_LENGTHS,
    *,
    decode_tokens: int = 16,
    threads: int = 0,
    with_torch: bool = True,
    allow_spinning: bool = False,
    progress: Any = print,
) -> dict[str, Any]:
    """Measure ORT (and torch) prefill per length and ORT decode per token."""
    from flinkai.llm.decoder import DecoderOptions, OnnxDecoder
    from flinkai.llm.generate import decode_greedy
    from flinkai.llm.tokenizer import LlmTokenizer

    threads = threads or (os.cpu_count() or 1)
    decoder = OnnxDecoder.load(
        options=DecoderOptions(intra_op_threads=threads, allow_spinning=allow_spinning)
    )
    art = decoder.artifacts
    tokenizer = LlmTokenizer(
        art.tokenizer_path, art.chat_template_path.read_text(), decoder.manifest.special_tokens
    )
    decoder.forward([1, 2, 3])  # warm-up: session arenas, kernels
    model = None
    torch: Any = None
    if with_torch:
        import torch as _torch

        from flinkai.models.llm_export import load_reference

        torch = _torch
        torch.set_num_threads(threads)
        model, _ = load_reference()
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))  # warm-up
    rows: list[LlmBenchRow] = []
    for length in lengths:
        ids = _prompt_ids(tokenizer, length)
        # No stop ids: every length decodes the same number of steps.
        done = decode_greedy(decoder, ids, decode_tokens + 1, ())
        prefill_ms = done.prefill_ms
        decode_ms = done.decode_ms / decode_tokens
        torch_ms: float | None = None
        if model is not None:
            with torch.no_grad():
                t0 = time.perf_counter()
                model(input_ids=torch.tensor([ids]), logits_to_keep=1)
                torch_ms = (time.perf_counter() - t0) * 1000
        row = LlmBenchRow(
            prompt_tokens=length,
            ort_prefill_ms=round(prefill_ms, 1),
            ort_decode_ms_per_token=round(decode_ms, 2),
            decode_tokens=decode_tokens,
            torch_prefill_ms=None if torch_ms is None else round(torch_ms, 1),
            torch_over_ort=None if torch_ms is None else round(torch_ms / prefill_ms, 2),
            kv_cache_mb=round(length * decoder.shape.kv_bytes_per_token / 1e6, 2),
        )
        progress(
            f"{length:>5} tokens: ORT prefill {row.ort_prefill_ms:8.1f} ms, decode "
            f"{row.ort_decode_ms_per_token:6.2f} ms/token, torch prefill {row.torch_prefill_ms} ms"
        )
        rows.append(row)
    from flinkai_bench.shared.suite import machine_info

    return {
        "model_id": decoder.model_id,
        "model_version": decoder.model_version,
        "threads": threads,
        "allow_spinning": allow_spinning,
        "kv_bytes_per_token": decoder.shape.kv_bytes_per_token,
        "repeats": 1,
        "gpu": _gpu_line(),
        "rows": [asdict(r) for r in rows],
        "machine": machine_info(),
    }


def _gpu_line() -> str:
    from flinkai_bench.shared.devices import SystemProbe, gpu_status

    return gpu_status(SystemProbe().report(), None, DECODER_PATH)


def _handle(args: argparse.Namespace) -> int:
    lengths = tuple(int(x) for x in args.lengths.split(","))
    result = run_llm_bench(
        lengths,
        decode_tokens=args.decode_tokens,
        threads=args.threads,
        with_torch=not args.no_torch,
        allow_spinning=args.allow_spinning,
    )
    print()
    print(
        "| prompt tokens | ORT prefill ms | ORT decode ms/token | torch prefill ms | torch/ORT | KV MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(
            f"| {r['prompt_tokens']} | {r['ort_prefill_ms']} | {r['ort_decode_ms_per_token']} | "
            f"{r['torch_prefill_ms'] or '-'} | {r['torch_over_ort'] or '-'} | {r['kv_cache_mb']} |"
        )
    print(f"KV cache: {result['kv_bytes_per_token']} bytes per token; GPU: {result['gpu']}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench llm``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "llm",
        help="prefill/decode latency of the exported SmolLM2 decoder (ORT vs torch)",
        description="Prefill chat prompts of the given lengths with the ONNX decoder and "
        "with transformers (same ids, same threads), then decode on the ONNX cache. "
        "Needs `flinkai model export-llm` (and the torch extra unless --no-torch).",
    )
    parser.add_argument(
        "--lengths",
        default=",".join(str(n) for n in DEFAULT_LENGTHS),
        help="comma-separated prompt lengths in tokens (128,512,1024,2048)",
    )
    parser.add_argument("--decode-tokens", type=int, default=16, help="decode steps (16)")
    parser.add_argument("--threads", type=int, default=0, help="threads, 0 = all cores")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch reference")
    parser.add_argument(
        "--allow-spinning", action="store_true", help="let ORT pool threads busy-wait"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.set_defaults(handler=_handle)
