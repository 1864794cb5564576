"""``flinkai plan``: memory planners (KV cache, cross-attention), optionally checked on tensors."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flinkai.plan.cross_attention import plan_cross_attention
from flinkai.plan.kvcache import (
    MINILM_L6,
    PRECISION_BITS,
    SMOLLM2_135M,
    ModelShape,
    kv_cache_bytes,
    kv_cache_bytes_gqa,
    kv_heads_per_device,
    l9_design,
)

__all__ = ["register"]

SHAPES: dict[str, ModelShape] = {"smollm2-135m": SMOLLM2_135M, "minilm-l6": MINILM_L6}
_MB = 2**20


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``flinkai plan kv-cache`` and ``flinkai plan cross-attention``."""
    parser = sub.add_parser(
        "plan", help="memory planners: KV cache, cross-attention", description=__doc__
    )
    group = parser.add_subparsers(dest="planner", metavar="PLANNER", required=True)

    kv = group.add_parser(
        "kv-cache",
        help="KV-cache size: the formula, its GQA correction, an L9 design",
        description="Per-device KV cache = seq_len x hidden x layers x 2 x 2 bytes / TP x "
        "compression x bits/16, over the L9(3^4) design of compression {0.5, 1, 2} x TP "
        "{1, 2, 4} x precision {int8, int6, fp16} x seq_len {512, 1024, 2048}, next to the "
        "grouped-query-attention size (num_kv_heads x head_dim instead of hidden). --check "
        "measures real K/V tensors (needs the [torch] extra).",
    )
    kv.add_argument("--model", choices=sorted(SHAPES), default="smollm2-135m")
    kv.add_argument("--batch", type=int, default=1, help="sequences (default: 1)")
    kv.add_argument(
        "--check",
        action="store_true",
        help="measure: MiniLM K/V projections on real text, the cache of a decoder "
        "with the model's shape (random weights), and for smollm2-135m the cache of the "
        "exported ONNX decoder (flinkai model export-llm)",
    )
    kv.add_argument(
        "--check-seq-len", type=int, default=256, help="prefill length of the decoder check"
    )
    kv.add_argument("--json", metavar="PATH", help="write the table as JSON here")
    kv.set_defaults(handler=_kv_cache)

    ca = group.add_parser(
        "cross-attention",
        help="video-frame x text-token attention memory, dense and windowed",
        description="Score memory of video-frame x text-token cross-attention, dense, with "
        "a temporal sliding-window mask, and block-sparse per window. --check allocates "
        "the real tensors (needs the [torch] extra).",
    )
    ca.add_argument("--frames", type=int, default=64)
    ca.add_argument("--text-tokens", type=int, default=512)
    ca.add_argument("--tokens-per-frame", type=int, default=16, help="patch tokens per frame")
    ca.add_argument("--heads", type=int, default=8)
    ca.add_argument("--window", type=int, default=4, help="frames per window (default: 4)")
    ca.add_argument("--stride", type=int, default=2, help="frames between windows (default: 2)")
    ca.add_argument("--bytes", type=int, default=4, help="bytes per score (default: 4, fp32)")
    ca.add_argument("--check", action="store_true", help="allocate the tensors and compare")
    ca.set_defaults(handler=_cross_attention)


def _error(planned: float, measured: float) -> str:
    if measured == 0:
        return "n/a"
    return f"{(planned - measured) / measured:+.2%}"


def _kv_cache(args: argparse.Namespace) -> int:
    shape = SHAPES[args.model]
    print(
        f"{shape.name}: {shape.n_layers} layers, hidden {shape.hidden}, {shape.n_heads} heads, "
        f"{shape.n_kv_heads} KV heads x head_dim {shape.head_dim} = KV width {shape.kv_width}"
    )
    if shape.n_kv_heads < shape.n_heads:
        print(
            f"grouped-query attention: the formula uses hidden ({shape.hidden}); the cache "
            f"holds {shape.n_kv_heads} x {shape.head_dim} = {shape.kv_width} per token per "
            f"layer, so the formula overstates it {shape.formula_overstatement:.1f}x"
        )
    print("\nL9(3^4): compression x TP x precision x seq_len (4th column), batch", args.batch)
    header = (
        f"{'run':>3} {'compr':>5} {'TP':>3} {'prec':>5} {'seq':>5} "
        f"{'formula MB':>11} {'GQA MB':>9} {'formula/GQA':>11}  note"
    )
    print(header)
    print("-" * len(header))
    rows: list[dict[str, Any]] = []
    for i, run in enumerate(l9_design(), start=1):
        bits = PRECISION_BITS[run["precision"]]
        common = {"bits": bits, "tp": run["tp"], "compression": run["compression"]}
        formula = kv_cache_bytes(
            run["seq_len"], shape.hidden, shape.n_layers, batch=args.batch, **common
        )
        true = kv_cache_bytes_gqa(shape, run["seq_len"], batch=args.batch, **common)
        per_device = kv_heads_per_device(shape.n_kv_heads, run["tp"])
        note = ""
        if shape.n_kv_heads % run["tp"] and run["tp"] % shape.n_kv_heads:
            note = f"{shape.n_kv_heads} KV heads do not split over TP {run['tp']}: {per_device}"
            note += " on the busiest device"
        elif run["tp"] > shape.n_kv_heads:
            note = f"TP {run['tp']} > {shape.n_kv_heads} KV heads: heads replicated"
        rows.append({**run, "formula_bytes": formula, "gqa_bytes": true, "note": note})
        print(
            f"{i:>3} {run['compression']:>5g} {run['tp']:>3} {run['precision']:>5} "
            f"{run['seq_len']:>5} {formula / _MB:>11.2f} {true / _MB:>9.2f} "
            f"{formula / true:>11.2f}  {note}"
        )
    checks: dict[str, Any] = {}
    if args.check:
        checks = _kv_checks(shape, args.check_seq_len)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape.__dict__, "runs": rows, "checks": checks}, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


def _kv_checks(shape: ModelShape, seq_len: int) -> dict[str, Any]:
    from flinkai.plan.measure import measure_bert_kv, measure_gqa_kv

    print("\nchecks against real tensors (fp32):")
    texts = _texts()
    bert = measure_bert_kv(texts)
    planned = kv_cache_bytes(bert.seq_len, MINILM_L6.hidden, MINILM_L6.n_layers, bits=32)
    planned *= bert.batch
    print(
        f"  {bert.model} K/V projections, {bert.batch} texts padded to {bert.seq_len} "
        f"tokens: measured {bert.bytes} B, formula {planned:.0f} B, error "
        f"{_error(planned, bert.bytes)}"
    )
    gqa = measure_gqa_kv(shape, seq_len)
    formula = kv_cache_bytes(seq_len, shape.hidden, shape.n_layers, bits=32)
    corrected = kv_cache_bytes_gqa(shape, seq_len, bits=32)
    print(
        f"  {shape.name}-shaped decoder cache after a {seq_len}-token prefill: measured "
        f"{gqa.bytes} B (width {gqa.width}); formula {formula:.0f} B (error "
        f"{_error(formula, gqa.bytes)}), GQA-corrected {corrected:.0f} B (error "
        f"{_error(corrected, gqa.bytes)})"
    )
    checks: dict[str, Any] = {
        "bert": {**bert.__dict__, "formula_bytes": planned},
        "decoder": {**gqa.__dict__, "formula_bytes": formula, "gqa_bytes": corrected},
    }
    if shape == SMOLLM2_135M:
        checks["onnx_decoder"] = _onnx_decoder_check(texts, shape, seq_len)
    return checks


def _onnx_decoder_check(texts: list[str], shape: ModelShape, seq_len: int) -> dict[str, Any]:
    # The exported decoder is the cache the snapshot store moves: the planner's last word.
    from flinkai.llm.errors import LlmArtifactError
    from flinkai.plan.measure import measure_onnx_decoder_kv

    try:
        real = measure_onnx_decoder_kv(" ".join(texts), seq_len)
    except LlmArtifactError as e:
        print(f"  exported ONNX decoder: not checked ({e})")
        return {"skipped": str(e)}
    formula = kv_cache_bytes(real.seq_len, shape.hidden, shape.n_layers, bits=32)
    corrected = kv_cache_bytes_gqa(shape, real.seq_len, bits=32)
    print(
        f"  {real.model} ONNX decoder (flinkai model export-llm) after a {real.seq_len}-token "
        f"prefill of real text: measured {real.bytes} B (width {real.width}); formula "
        f"{formula:.0f} B (error {_error(formula, real.bytes)}), GQA-corrected "
        f"{corrected:.0f} B (error {_error(corrected, real.bytes)})"
    )
    return {**real.__dict__, "formula_bytes": formula, "gqa_bytes": corrected}


def _texts() -> list[str]:
    from flinkai.datasets import DatasetNotFoundError, load_ag_news

    try:
        return [t for _, t in load_ag_news(limit=16)]
    except DatasetNotFoundError:
        from flinkai.models.export import SAMPLE_SENTENCES

        return list(SAMPLE_SENTENCES)


def _cross_attention(args: argparse.Namespace) -> int:
    shape = {
        "tokens_per_frame": args.tokens_per_frame,
        "heads": args.heads,
        "window": args.window,
        "stride": args.stride,
    }
    plan = plan_cross_attention(
        args.frames, args.text_tokens, bytes_per_element=args.bytes, **shape
    )
    b = args.bytes
    print(
        f"{args.frames} frames x {args.tokens_per_frame} tokens, {args.text_tokens} text "
        f"tokens, {args.heads} heads, window {args.window} frames, stride {args.stride} "
        f"({plan.windows} windows), {b} B per score"
    )
    print(f"{'':<28} {'elements':>12} {'MB':>10}")
    print(f"{'dense (no window)':<28} {plan.dense_elements:>12} {plan.dense_bytes / _MB:>10.2f}")
    print(
        f"{'windowed mask, nonzero':<28} {plan.masked_nonzero:>12} "
        f"{plan.masked_nonzero * b / _MB:>10.2f}  (memory stays dense)"
    )
    print(
        f"{'block-sparse, per window':<28} {plan.block_elements:>12} {plan.block_bytes / _MB:>10.2f}"
    )
    if args.check:
        from flinkai.plan.measure import measure_cross_attention

        real = measure_cross_attention(args.frames, args.text_tokens, **shape)
        print("\nchecked against allocated tensors:")
        for label, planned, measured in (
            ("dense elements", plan.dense_elements, real.dense_elements),
            ("mask nonzero", plan.masked_nonzero, real.masked_nonzero),
            ("block elements", plan.block_elements, real.block_elements),
        ):
            print(
                f"  {label:<16} planned {planned:>10} measured {measured:>10} "
                f"error {_error(planned, measured)}"
            )
    return 0
