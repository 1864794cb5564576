"""Measurements of the snapshot store, for a ``flinkai bench kvcache`` command to call.

Nothing here asserts a speed: the functions measure and return figures.

KV-like test tensors come in two kinds. ``normal`` is i.i.d. standard normal: the
hardest case for a compressor (only the exponent bytes repeat). ``smooth`` varies
slowly along the token axis, one low-frequency wave per channel plus a little
noise, closer to real keys and values (rotary position embeddings are sinusoids
over positions, and neighbouring tokens have similar activations).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from flinkai.state.base import SnapshotKey, Version, prefix_hash
from flinkai.state.codec import CodecConfig, decode, encode
from flinkai.state.kafka import KafkaSnapshotStore, KafkaStoreConfig

__all__ = [
    "BatchFigures",
    "CodecFigures",
    "ThroughputFigures",
    "kv_like",
    "measure_codec",
    "measure_kafka_batch",
    "measure_kafka_throughput",
]

DataKind = Literal["normal", "smooth"]
#: SmolLM2-135M's per-layer KV layout: (K/V, KV heads, tokens, head dim).
_KV_HEADS, _HEAD_DIM = 3, 64
_MB = 1e6


def kv_like(
    nbytes: int, dtype: str = "float16", kind: DataKind = "smooth", seed: int = 0
) -> np.ndarray:
    """A tensor shaped like one layer's KV cache, of about ``nbytes`` bytes.

    Args:
        nbytes: Target size; the token count is rounded down (at least one token).
        dtype: Element type.
        kind: ``normal`` or ``smooth`` (see the module docstring).
        seed: Random seed.

    Returns:
        An array of shape ``(2, 3, tokens, 64)``.
    """
    rng = np.random.default_rng(seed)
    per_token = 2 * _KV_HEADS * _HEAD_DIM * np.dtype(dtype).itemsize
    shape = (2, _KV_HEADS, max(1, nbytes // per_token), _HEAD_DIM)
    if kind == "normal":
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    channels = (2, _KV_HEADS, 1, _HEAD_DIM)
    t = np.arange(shape[2], dtype=np.float32)[None, None, :, None]
    freq = rng.uniform(0.001, 0.05, channels).astype(np.float32)
    phase = rng.uniform(0.0, 2 * np.pi, channels).astype(np.float32)
    amp = rng.uniform(0.5, 3.0, channels).astype(np.float32)
    noise = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    return (amp * np.sin(t * freq + phase) + noise).astype(dtype)


@dataclass(frozen=True)
class CodecFigures:
    """Codec ratio and speeds on one tensor; speeds are over raw (decoded) bytes.

    Attributes:
        compression: The codec label.
        raw_bytes: Tensor size.
        payload_bytes: Encoded size.
        encode_mb_s: Encode speed, sha256 and shuffle included.
        decode_mb_s: Decode speed, verification included.
    """

    compression: str
    raw_bytes: int
    payload_bytes: int
    encode_mb_s: float
    decode_mb_s: float

    @property
    def ratio(self) -> float:
        """Raw bytes over encoded bytes."""
        return self.raw_bytes / max(1, self.payload_bytes)


def measure_codec(tensor: np.ndarray, codec: CodecConfig, repeats: int = 3) -> CodecFigures:
    """Best-of-``repeats`` encode and decode speed of ``codec`` on ``tensor``."""
    best_enc = best_dec = float("inf")
    meta, payload = encode(tensor, codec, version=Version(0), model_version="bench")
    for _ in range(repeats):
        began = time.perf_counter()
        meta, payload = encode(tensor, codec, version=Version(0), model_version="bench")
        best_enc = min(best_enc, time.perf_counter() - began)
        began = time.perf_counter()
        decode(payload, meta)
        best_dec = min(best_dec, time.perf_counter() - began)
    return CodecFigures(
        compression=codec.compression,
        raw_bytes=tensor.nbytes,
        payload_bytes=len(payload),
        encode_mb_s=tensor.nbytes / _MB / best_enc,
        decode_mb_s=tensor.nbytes / _MB / best_dec,
    )


@dataclass(frozen=True)
class ThroughputFigures:
    """Put and get speed of the Kafka store, in MB/s of raw tensor bytes (best run).

    Attributes:
        snapshot_bytes: Raw size of each snapshot.
        payload_bytes: Its encoded size.
        records: Kafka records per snapshot.
        put_mb_s: Encode, produce and commit one snapshot.
        get_cold_mb_s: Another store instance reads it, once it is visible there:
            fetch by offset, decode and verify.
        get_cached_mb_s: The same read again, served from that instance's cache.
        runs: Snapshots timed.
    """

    snapshot_bytes: int
    payload_bytes: int
    records: int
    put_mb_s: float
    get_cold_mb_s: float
    get_cached_mb_s: float
    runs: int


def _await_visible(store: KafkaSnapshotStore, key: SnapshotKey, version: Version) -> None:
    deadline = time.monotonic() + store.config.visibility_timeout_s
    while version not in store.versions(key) and time.monotonic() < deadline:
        time.sleep(0.01)


#: Seconds of one run: put, cold get (another store instance), cached get (the same again).
_Timings = tuple[float, float, float]


def _timed_twice(read: Callable[[], object]) -> tuple[float, float]:
    """Seconds of a first (cold) and a second (cached) call of the same read."""
    began = time.perf_counter()
    read()
    cold = time.perf_counter() - began
    began = time.perf_counter()
    read()
    return cold, time.perf_counter() - began


def _best_of(
    config: KafkaStoreConfig,
    runs: int,
    one_run: Callable[[int, KafkaSnapshotStore, KafkaSnapshotStore], _Timings],
) -> _Timings:
    """The best (least) seconds of each figure over ``runs`` runs.

    A writer and a separate reader store are opened once, so the reader's first read
    of each run is a cache miss. Each run waits until its write is visible to the
    reader before timing the read: commit markers land a few ms after the put returns,
    and that lag is latency, not throughput.
    """
    reader_config = replace(config, create_topic=False)
    best = [float("inf")] * 3
    with KafkaSnapshotStore(config) as writer, KafkaSnapshotStore(reader_config) as reader:
        for run in range(runs):
            best = [min(b, t) for b, t in zip(best, one_run(run, writer, reader), strict=True)]
    return best[0], best[1], best[2]


def measure_kafka_throughput(
    config: KafkaStoreConfig,
    snapshot_bytes: int,
    *,
    runs: int = 3,
    dtype: str = "float16",
    kind: DataKind = "smooth",
) -> ThroughputFigures:
    """Time puts and gets of ``snapshot_bytes`` snapshots through a real broker.

    Writes to ``config.topic`` with a fresh key per run; a writer and a separate
    reader store are opened (the reader's first get of each snapshot is a cache miss).

    Args:
        config: Store config; its topic is created when missing.
        snapshot_bytes: Raw tensor size per snapshot.
        runs: Snapshots to time; the best run of each figure is reported.
        dtype: Tensor element type.
        kind: Test data (see :func:`kv_like`).

    Returns:
        The figures.
    """
    tensor = kv_like(snapshot_bytes, dtype, kind)
    mb = tensor.nbytes / _MB
    payload_bytes = len(encode(tensor, config.codec, version=Version(0), model_version="")[1])
    records = max(1, -(-payload_bytes // config.chunk_bytes))

    def one_run(run: int, writer: KafkaSnapshotStore, reader: KafkaSnapshotStore) -> _Timings:
        key = SnapshotKey("bench", 0, prefix_hash([run, *uuid.uuid4().bytes]))
        began = time.perf_counter()
        version = writer.put(key, tensor, model_version="bench")
        put_s = time.perf_counter() - began
        _await_visible(reader, key, version)
        cold_s, cached_s = _timed_twice(lambda: reader.get_version(key, version))
        writer.delete(key)
        return put_s, cold_s, cached_s

    best_put, best_cold, best_cached = _best_of(config, runs, one_run)
    return ThroughputFigures(
        snapshot_bytes=tensor.nbytes,
        payload_bytes=payload_bytes,
        records=records,
        put_mb_s=mb / best_put,
        get_cold_mb_s=mb / best_cold,
        get_cached_mb_s=mb / best_cached,
        runs=runs,
    )


@dataclass(frozen=True)
class BatchFigures:
    """``put_many`` / ``get_many`` speed of the Kafka store, in MB/s of raw bytes (best run).

    This is how the prefix cache uses the store: one ``put_many`` (one transaction)
    per prompt with a snapshot per layer and block, one ``get_many`` per lookup.

    Attributes:
        snapshots: Snapshots per call.
        shape: Shape of each snapshot.
        total_bytes: Raw bytes per call.
        payload_bytes: Encoded bytes per call.
        records: Kafka records per call.
        put_mb_s: ``put_many``: encode all, produce, one commit.
        get_cold_mb_s: ``get_many`` on another store instance, once visible there.
        get_cached_mb_s: The same ``get_many`` again, from that instance's cache.
        runs: Calls timed.
    """

    snapshots: int
    shape: tuple[int, ...]
    total_bytes: int
    payload_bytes: int
    records: int
    put_mb_s: float
    get_cold_mb_s: float
    get_cached_mb_s: float
    runs: int


def measure_kafka_batch(
    config: KafkaStoreConfig,
    snapshots: int,
    shape: tuple[int, ...],
    *,
    runs: int = 3,
    dtype: str = "float32",
    kind: DataKind = "smooth",
) -> BatchFigures:
    """Time ``put_many`` and ``get_many`` of ``snapshots`` tensors of ``shape``.

    The tensors differ (one seed each), so the codec sees as many distinct bytes as
    in real use. A fresh set of keys per run; a separate reader store does the
    cold reads.
    """
    tokens_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    tensors = [kv_like(tokens_bytes, dtype, kind, seed=i).reshape(shape) for i in range(snapshots)]
    total = sum(t.nbytes for t in tensors)
    mb = total / _MB
    payloads = [
        len(encode(t, config.codec, version=Version(0), model_version="")[1]) for t in tensors
    ]
    records = sum(max(1, -(-p // config.chunk_bytes)) for p in payloads)

    def get_all(reader: KafkaSnapshotStore, keys: list[SnapshotKey]) -> None:
        got = reader.get_many(keys)
        if any(g is None for g in got):
            raise RuntimeError(f"get_many missed {sum(g is None for g in got)} snapshots")

    def one_run(run: int, writer: KafkaSnapshotStore, reader: KafkaSnapshotStore) -> _Timings:
        block = prefix_hash([run, *uuid.uuid4().bytes])
        keys = [SnapshotKey("bench", layer, block) for layer in range(snapshots)]
        began = time.perf_counter()
        versions = writer.put_many(list(zip(keys, tensors, strict=True)), model_version="b")
        put_s = time.perf_counter() - began
        _await_visible(reader, keys[-1], versions[-1])
        cold_s, cached_s = _timed_twice(lambda: get_all(reader, keys))
        return put_s, cold_s, cached_s

    best_put, best_cold, best_cached = _best_of(config, runs, one_run)
    return BatchFigures(
        snapshots=snapshots,
        shape=tuple(shape),
        total_bytes=total,
        payload_bytes=sum(payloads),
        records=records,
        put_mb_s=mb / best_put,
        get_cold_mb_s=mb / best_cold,
        get_cached_mb_s=mb / best_cached,
        runs=runs,
    )
