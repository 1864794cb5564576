"""``flinkai bench kvcache --cold-worker``: a cold worker as a worker meets it.

The topic first gets ``fill_mb`` of other prefixes (random K/V under random block
hashes, published as the prefix cache does), then, for each prompt length, a seed
prompt's real K/V (one untimed prefill). For each length a *separate process* then
starts like a new Flink worker: it loads the decoder and warms it up (start-up,
untimed), then serves its first prompt, which shares ``share`` of the seed's tokens.
Its TTFT counts opening the store (the index rebuild) + lookup + restore + prefill
of the rest + the first logits. The same process then serves a prompt of the same
length with no cache: the baseline, measured on the same process and cores.

``measure_open`` times the store's open alone, in fresh processes, against a floor
measured in the same run: a plain librdkafka consumer (with the store's connection
setting) that fetches the index topic's metadata and reads it to its end, filing nothing. The floor is what any opener of this
topic pays on this machine; the store's open over it is what the store adds.

From those figures comes the break-even: the restore bandwidth, this machine's
prefill ms/token, and the shortest prompt for which opening the store and restoring
beats recomputing. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from flinkai.llm.cache import KvCache, ModelShape
from flinkai.llm.prefix import Decoder, PrefixCache
from flinkai.state import CodecConfig, KafkaSnapshotStore, KafkaStoreConfig

__all__ = [
    "FAST_CODEC",
    "break_even",
    "fill_topic",
    "gpu_bandwidth_per_1k_tokens_s",
    "measure_open",
    "run_cold_workers",
]

#: The store's fast settings: no compression (the wire is loopback), xxh3 checksum.
FAST_CODEC = CodecConfig(codec="none", byte_shuffle=False, checksum="xxh3_128")
#: Shapes for the GPU bandwidth line: (name, layers, KV heads, head dim, bytes/element).
GPU_SHAPES = (
    ("SmolLM2-135M fp32 (as stored here)", 30, 3, 64, 4),
    ("SmolLM2-135M fp16", 30, 3, 64, 2),
    ("Llama-3-70B fp16 (80 layers, 8 KV heads, head dim 128)", 80, 8, 128, 2),
)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """K and V of every layer for one token."""
    return 2 * layers * kv_heads * head_dim * itemsize


def gpu_bandwidth_per_1k_tokens_s() -> list[dict[str, Any]]:
    """Restore bandwidth that matches a prefill rate of 1,000 tokens/s, per model shape.

    A restore beats recompute on a GPU only above ``prefill tokens/s x bytes/token``;
    the GPU prefill rate itself is not measured here, so the figure is per 1,000
    tokens/s (multiply by a measured rate).
    """
    return [
        {
            "model": name,
            "kv_bytes_per_token": kv_bytes_per_token(layers, heads, dim, size),
            "mb_s_per_1k_prefill_tokens_s": kv_bytes_per_token(layers, heads, dim, size) / 1e3,
        }
        for name, layers, heads, dim, size in GPU_SHAPES
    ]


def fill_topic(
    config: KafkaStoreConfig,
    shape: ModelShape,
    *,
    model_id: str,
    model_version: str,
    mb: float,
    block_tokens: int,
    tokens_per_prompt: int = 1024,
) -> dict[str, float]:
    """Publish about ``mb`` MB of other prompts' blocks; put MB/s of each ``put_many``."""
    rng = np.random.default_rng(7)
    tokens = tokens_per_prompt + 1
    layer = (1, shape.n_kv_heads, tokens, shape.head_dim)
    cache = KvCache(
        tuple(rng.standard_normal(layer, dtype=np.float32) for _ in range(shape.n_layers)),
        tuple(rng.standard_normal(layer, dtype=np.float32) for _ in range(shape.n_layers)),
    )
    per_prompt = tokens_per_prompt * shape.kv_bytes_per_token / 1e6
    prompts = int(mb // per_prompt)
    rates: list[float] = []
    with KafkaSnapshotStore(config) as store:
        prefix = PrefixCache(
            store,
            model_id=model_id,
            model_version=model_version,
            shape=shape,
            block_tokens=block_tokens,
        )
        for _ in range(prompts):
            ids = [int(t) for t in rng.integers(256, 49000, tokens)]
            began = time.perf_counter()
            prefix.publish(ids, cache)
            rates.append(per_prompt / (time.perf_counter() - began))
    return {
        "fill_mb": prompts * per_prompt,
        "fill_prompts": prompts,
        "put_many_mb_s_p50": float(np.median(rates)) if rates else float("nan"),
        "put_many_mb_s_max": max(rates, default=float("nan")),
    }


def _prompts(length: int, share: float, seed: int) -> tuple[list[int], list[int], list[int]]:
    """Seed, cold prompt (shares ``share`` of the seed), no-cache prompt (shares nothing)."""
    rng = np.random.default_rng(seed)
    shared = [int(t) for t in rng.integers(256, 49000, int(share * length))]

    def tail(n: int) -> list[int]:
        return [int(t) for t in rng.integers(256, 49000, n)]

    seed_ids = shared + tail(length - len(shared))
    return seed_ids, shared + tail(length - len(shared)), tail(length)


def run_cold_workers(
    decoder: Decoder,
    config: KafkaStoreConfig,
    lengths: Sequence[int],
    *,
    share: float,
    block_tokens: int,
    worker_argv: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Seed each length's prefix, then serve its first prompt in a new process.

    Args:
        decoder: The model, for the seed prefills (same export as the worker loads).
        config: The (filled) store topic.
        lengths: Prompt lengths in tokens.
        share: Fraction of the cold prompt shared with the seed.
        block_tokens: Prefix block size.
        worker_argv: Extra arguments for the worker (``--config PATH``).
        progress: Called with a line per finished length.
    """
    rows = []
    for n, length in enumerate(lengths):
        seed_ids, cold_ids, plain_ids = _prompts(length, share, seed=100 + n)
        with KafkaSnapshotStore(config) as store:
            _, cache = decoder.forward(seed_ids)
            PrefixCache.for_decoder(decoder, store, block_tokens=block_tokens).publish(
                seed_ids, cache
            )
        job = {
            "bootstrap": config.bootstrap,
            "topic": config.topic,
            "codec": asdict(config.codec),
            "block_tokens": block_tokens,
            "cold_ids": cold_ids,
            "plain_ids": plain_ids,
        }
        row: dict[str, Any] = {"length": length, "share": share}
        row.update(_in_new_process(job, worker_argv))
        row["x_no_cache"] = row["ttft_with_open_ms"] / row["no_cache_ttft_ms"]
        rows.append(row)
        progress(
            f"cold worker len {length} share {share:.0%}: open {row['open_ms']:.0f} ms + "
            f"TTFT {row['ttft_ms']:.0f} ms = {row['ttft_with_open_ms']:.0f} ms, no cache "
            f"{row['no_cache_ttft_ms']:.0f} ms ({row['x_no_cache']:.2f}x)"
        )
    return rows


def _in_new_process(job: dict[str, Any], argv: Sequence[str] = ()) -> dict[str, Any]:
    """Run one ``job`` in a fresh interpreter (``--worker``) and return its JSON line."""
    out = subprocess.run(
        [sys.executable, "-m", "flinkai_bench.kvcache_cold", "--worker", json.dumps(job), *argv],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cold worker failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure_open(config: KafkaStoreConfig, runs: int, *, timeout_s: float = 30.0) -> dict[str, Any]:
    """Store open against the plain-consumer floor, ``runs`` fresh processes each.

    The two alternate (floor first on even runs), so drift in the machine's load hits
    both alike. Raises ``RuntimeError`` when a process fails (a missing topic fails
    after ``timeout_s``).
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    base = {"bootstrap": config.bootstrap, "topic": config.topic, "timeout_s": timeout_s}
    opens: list[float] = []
    floors: list[dict[str, Any]] = []
    for n in range(runs):
        order = ("floor", "open") if n % 2 == 0 else ("open", "floor")
        for mode in order:
            got = _in_new_process({**base, "mode": mode})
            if mode == "open":
                opens.append(got["open_ms"])
            else:
                floors.append(got)
    floor_ms = [f["floor_ms"] for f in floors]
    return {
        "runs": runs,
        "open_ms": opens,
        "floor_ms": floor_ms,
        "index_bytes": floors[0]["index_bytes"],
        "index_records": floors[0]["index_records"],
        "open_ms_p50": float(np.median(opens)),
        "floor_ms_p50": float(np.median(floor_ms)),
        "open_over_floor_p50": float(
            np.median([o / f for o, f in zip(opens, floor_ms, strict=True)])
        ),
    }


def _open_only(job: dict[str, Any]) -> dict[str, Any]:
    """Open a store on the job's topic (no model loaded), and close it."""
    config = KafkaStoreConfig(
        bootstrap=job["bootstrap"],
        topic=job["topic"],
        create_topic=False,
        request_timeout_s=float(job.get("timeout_s", 30.0)),
    )
    began = time.perf_counter()
    store = KafkaSnapshotStore(config)
    open_ms = (time.perf_counter() - began) * 1000
    tail_records = store.tail_records
    store.close()
    return {"pid": os.getpid(), "open_ms": open_ms, "tail_records": tail_records}


def _open_floor(job: dict[str, Any]) -> dict[str, Any]:
    """A plain ``read_committed`` consumer: the index topic's metadata, then all of it."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from flinkai.state.kafka import CONNECT_AT_ONCE

    topic = KafkaStoreConfig(bootstrap=job["bootstrap"], topic=job["topic"]).index_topic_name
    began = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": job["bootstrap"],
            "group.id": f"flinkai-open-floor-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            # The store's connection setting, so the two compare like with like.
            **CONNECT_AT_ONCE,
        }
    )
    partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    # The end is each partition's EOF event, which read_committed raises at the last
    # stable offset (commit markers included), as the store's tail reads to it.
    done: set[int] = set()
    records = size = 0
    while len(done) < len(partitions):
        for m in consumer.consume(4096, 0.01):
            error = m.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {topic!r}: {error}")
                done.add(int(m.partition() or 0))
                continue
            records += 1
            size += len(m.value() or b"")
        if time.perf_counter() - began > 60:
            raise RuntimeError(f"reading {topic!r} did not reach its end in 60 s")
    floor_ms = (time.perf_counter() - began) * 1000
    consumer.close()
    return {"pid": os.getpid(), "floor_ms": floor_ms, "index_records": records, "index_bytes": size}


def break_even(rows: Sequence[dict[str, Any]], kv_bytes_per_token: int) -> dict[str, Any]:
    """Restore bandwidth, prefill ms/token and the length from which restoring pays.

    A cold worker pays ``open_ms`` once, then ``bytes / bandwidth`` per restored
    token, against ``prefill ms/token`` to recompute it. With every token but the
    last restorable, restoring wins from ``open_ms / (prefill - restore per token)``
    tokens on. Figures are medians over the rows (one per length).
    """
    restore = [
        r["restored_mb"] / (r["restore_ms"] / 1000)
        for r in rows
        if r["restore_ms"] > 0 and r["restored_mb"] > 0
    ]
    prefill = [r["no_cache_prefill_ms"] / r["length"] for r in rows]
    opens = [r["open_ms"] for r in rows]
    if not restore or not prefill:
        return {}
    mb_s = float(np.median(restore))
    prefill_ms = float(np.median(prefill))
    open_ms = float(np.median(opens))
    restore_ms_per_token = kv_bytes_per_token / (mb_s * 1e6) * 1000
    gain = prefill_ms - restore_ms_per_token
    return {
        "restore_mb_s": mb_s,
        "prefill_ms_per_token": prefill_ms,
        "restore_ms_per_token": restore_ms_per_token,
        "open_ms": open_ms,
        "break_even_tokens": open_ms / gain if gain > 0 else None,
        "gpu_prefill": "n/a (no GPU: prefill not measured on this machine)",
        "gpu_bandwidth_per_1k_prefill_tokens_s": gpu_bandwidth_per_1k_tokens_s(),
    }


def _worker(job: dict[str, Any], config_path: str | None) -> dict[str, Any]:
    """One cold worker: load and warm the decoder, then open the store and serve."""
    from flinkai.config import load_config
    from flinkai.functions.llm import load_prompt_model

    mode = job.get("mode", "serve")
    if mode == "open":
        return _open_only(job)
    if mode == "floor":
        return _open_floor(job)
    decoder = load_prompt_model(load_config(config_path)).decoder
    decoder.forward([1, 2, 3])  # start-up: not in TTFT
    codec = CodecConfig(**job["codec"])
    store_config = KafkaStoreConfig(
        bootstrap=job["bootstrap"], topic=job["topic"], codec=codec, create_topic=False
    )
    began = time.perf_counter()
    store = KafkaSnapshotStore(store_config)
    open_ms = (time.perf_counter() - began) * 1000
    prefix = PrefixCache.for_decoder(
        decoder, store, block_tokens=job["block_tokens"], publish=False
    )
    done = prefix.complete(decoder, job["cold_ids"], max_new_tokens=1)
    ttft_with_open_ms = (time.perf_counter() - began) * 1000
    store.close()
    plain = PrefixCache.for_decoder(decoder, None).complete(
        decoder, job["plain_ids"], max_new_tokens=1
    )
    shape = decoder.shape
    return {
        "pid": os.getpid(),
        "open_ms": open_ms,
        "ttft_ms": done.ttft_ms,
        "ttft_with_open_ms": ttft_with_open_ms,
        "cached_tokens": done.cached_tokens,
        "restore_ms": done.restore_ms,
        "restored_mb": done.cached_tokens * shape.kv_bytes_per_token / 1e6,
        "prefill_ms": done.prefill_ms,
        "fetched_bytes": store.stats.fetched_bytes,
        "rejected": dict(prefix.stats.rejected),
        "no_cache_ttft_ms": plain.ttft_ms,
        "no_cache_prefill_ms": plain.prefill_ms,
    }


def _main() -> int:
    parser = argparse.ArgumentParser(prog="python -m flinkai_bench.kvcache_cold")
    parser.add_argument("--worker", required=True, help="the job, as JSON")
    parser.add_argument("--config")
    args = parser.parse_args()
    print(json.dumps(_worker(json.loads(args.worker), args.config)))
    return 0


def cold_config(
    bootstrap: str, topic: str | None = None, *, codec: CodecConfig = FAST_CODEC
) -> KafkaStoreConfig:
    """The store config of the cold-worker run (fast codec, a fresh topic)."""
    return KafkaStoreConfig(
        bootstrap=bootstrap,
        topic=topic or f"bench-kv-cold-{uuid.uuid4().hex[:10]}",
        codec=codec,
        request_timeout_s=60.0,
    )


if __name__ == "__main__":
    raise SystemExit(_main())
