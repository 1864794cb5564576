"""KV-cache size: the planning formula, where it is wrong, and an L9 design over its knobs.

The formula of the issue, per device::

    seq_len x hidden x layers x 2 (K and V) x 2 bytes / TP x compression x bits / 16

It assumes every attention head has its own K and V, so the cached width is
``hidden``. Grouped-query attention (GQA) shares K/V between query heads: the cached
width is ``num_kv_heads x head_dim``, and the formula overstates the cache by
``hidden / (num_kv_heads x head_dim)``: 3x for SmolLM2-135M (576 vs 3 x 64).
``/ TP`` is also only exact when TP splits the KV heads evenly; SmolLM2's 3 KV heads
do not split over 2 or 4 devices, so the busiest device holds ``ceil(3 / TP)`` heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from flinkai.llm.cache import ModelShape
from flinkai.plan.errors import PlanError

__all__ = [
    "L9",
    "L9_FACTORS",
    "MINILM_L6",
    "PRECISION_BITS",
    "SMOLLM2_135M",
    "ModelShape",
    "kv_cache_bytes",
    "kv_cache_bytes_gqa",
    "kv_heads_per_device",
    "l9_design",
]

#: Bits per cached element.
PRECISION_BITS: dict[str, int] = {"fp32": 32, "fp16": 16, "bf16": 16, "int8": 8, "int6": 6}

#: The L9(3^4) orthogonal array, levels 0-2: every pair of columns holds each of the
#: nine level pairs exactly once, so 9 runs cover 4 three-level factors pairwise.
L9: tuple[tuple[int, int, int, int], ...] = (
    (0, 0, 0, 0),
    (0, 1, 1, 1),
    (0, 2, 2, 2),
    (1, 0, 1, 2),
    (1, 1, 2, 0),
    (1, 2, 0, 1),
    (2, 0, 2, 1),
    (2, 1, 0, 2),
    (2, 2, 1, 0),
)

#: The issue's factors, one per L9 column (the fourth, seq_len, fills the spare column).
L9_FACTORS: dict[str, tuple[Any, Any, Any]] = {
    "compression": (0.5, 1.0, 2.0),
    "tp": (1, 2, 4),
    "precision": ("int8", "int6", "fp16"),
    "seq_len": (512, 1024, 2048),
}


#: Published shape of HuggingFaceTB/SmolLM2-135M (config.json): GQA, 3 KV heads.
SMOLLM2_135M = ModelShape(
    n_layers=30,
    n_kv_heads=3,
    head_dim=64,
    vocab_size=49152,
    name="SmolLM2-135M",
    hidden=576,
    n_heads=9,
)
#: sentence-transformers/all-MiniLM-L6-v2 (BERT): one K/V per head, so width = hidden.
MINILM_L6 = ModelShape(
    n_layers=6,
    n_kv_heads=12,
    head_dim=32,
    vocab_size=30522,
    name="all-MiniLM-L6-v2",
    hidden=384,
    n_heads=12,
)


def _check(seq_len: int, tp: int, compression: float, bits: int, batch: int) -> None:
    if seq_len < 0 or tp < 1 or compression <= 0 or bits < 1 or batch < 1:
        raise PlanError(
            f"need seq_len >= 0, tp >= 1, compression > 0, bits >= 1, batch >= 1; got "
            f"seq_len={seq_len}, tp={tp}, compression={compression}, bits={bits}, batch={batch}"
        )


def kv_cache_bytes(
    seq_len: int,
    hidden: int,
    layers: int,
    *,
    bits: int = 16,
    tp: int = 1,
    compression: float = 1.0,
    batch: int = 1,
) -> float:
    """The issue's formula: per-device KV bytes, with ``hidden`` as the cached width.

    Args:
        seq_len: Cached tokens per sequence.
        hidden: Model width.
        layers: Decoder layers.
        bits: Bits per element (16 for fp16; the formula scales by ``bits / 16``).
        tp: Tensor-parallel degree; the formula divides evenly.
        compression: Size multiplier (0.5 halves the cache).
        batch: Sequences.
    """
    _check(seq_len, tp, compression, bits, batch)
    return batch * seq_len * hidden * layers * 2 * 2 / tp * compression * bits / 16


def kv_heads_per_device(kv_heads: int, tp: int) -> int:
    """KV heads on the busiest device: ``ceil(kv_heads / tp)``, at least one.

    With ``tp > kv_heads`` each device still holds a (replicated) head.
    """
    if kv_heads < 1 or tp < 1:
        raise PlanError(f"need kv_heads >= 1 and tp >= 1, got {kv_heads}, {tp}")
    return max(1, math.ceil(kv_heads / tp))


def kv_cache_bytes_gqa(
    shape: ModelShape,
    seq_len: int,
    *,
    bits: int = 16,
    tp: int = 1,
    compression: float = 1.0,
    batch: int = 1,
) -> float:
    """Per-device KV bytes with the true cached width (``kv_heads x head_dim``).

    TP splits whole KV heads, so the busiest device is sized (see
    :func:`kv_heads_per_device`).
    """
    _check(seq_len, tp, compression, bits, batch)
    heads = kv_heads_per_device(shape.n_kv_heads, tp)
    return batch * seq_len * heads * shape.head_dim * shape.n_layers * 2 * bits / 8 * compression


def l9_design(factors: dict[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """The nine runs of the L9 array with each column mapped to its factor's levels.

    Args:
        factors: Up to four factors of three levels each (default :data:`L9_FACTORS`).
            Missing columns are left out of the runs (unused).

    Raises:
        PlanError: More than four factors, or a factor without exactly three levels.
    """
    factors = dict(L9_FACTORS if factors is None else factors)
    if len(factors) > 4:
        raise PlanError(f"L9 has four columns; got {len(factors)} factors")
    for name, levels in factors.items():
        if len(levels) != 3:
            raise PlanError(f"factor {name!r} needs three levels, got {len(levels)}")
    return [
        {name: levels[row[col]] for col, (name, levels) in enumerate(factors.items())} for row in L9
    ]
