"""Memory planners: closed-form sizes for KV caches and cross-attention, checked on tensors.

:mod:`.kvcache` sizes a decoder's KV cache (the issue's formula, its grouped-query
correction and an L9 orthogonal design over compression, tensor parallelism,
precision and sequence length); :mod:`.cross_attention` sizes video-frame x text-token
attention with and without a temporal sliding window; :mod:`.measure` builds the real
tensors (torch, the ``[torch]`` extra) the formulas are checked against. The CLI is
``flinkai plan``.
"""

from flinkai.plan.cross_attention import CrossAttentionPlan, plan_cross_attention
from flinkai.plan.errors import PlanError
from flinkai.plan.kvcache import (
    L9,
    MINILM_L6,
    SMOLLM2_135M,
    ModelShape,
    kv_cache_bytes,
    kv_cache_bytes_gqa,
    l9_design,
)

__all__ = [
    "L9",
    "MINILM_L6",
    "SMOLLM2_135M",
    "CrossAttentionPlan",
    "ModelShape",
    "PlanError",
    "kv_cache_bytes",
    "kv_cache_bytes_gqa",
    "l9_design",
    "plan_cross_attention",
]
