"""Kafka settings for the adapters topic: one adapter is one record of megabytes.

An r = 8 adapter on q/v of SmolLM2 is about 1.84 MB in fp32, above Kafka's default
1 MB message limit, so the topic must allow larger records (``max.message.bytes``)
and the job's producer larger requests (``properties.max.request.size`` in
``jobs/finetune_lora.sql``, the same bound). Consumers need nothing: a fetch returns
at least one record, however large.
"""

from __future__ import annotations

__all__ = ["ADAPTER_MAX_BYTES", "adapter_topic_configs"]

#: Default bound on one adapter record (16 MiB: rank 64 on q/v of SmolLM2 still fits).
ADAPTER_MAX_BYTES = 16 * 1024 * 1024


def adapter_topic_configs(max_bytes: int = ADAPTER_MAX_BYTES) -> dict[str, str]:
    """Topic configs for an adapters topic whose records may be ``max_bytes`` long."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    return {"max.message.bytes": str(max_bytes)}
