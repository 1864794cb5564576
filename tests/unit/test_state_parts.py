"""Unit tests of the snapshot store's parts: versions, keys, codec, headers, cache."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

from flinkai.state import ByteLRUCache, CodecConfig, SnapshotKey, Version, next_version
from flinkai.state.base import prefix_hash
from flinkai.state.codec import decode, encode
from flinkai.state.errors import SnapshotCorruptError
from flinkai.state.kafka import KafkaStoreConfig, parse_headers, record_headers, record_key

RNG = np.random.default_rng(7)
CODECS = [
    CodecConfig(),
    CodecConfig(byte_shuffle=False),
    CodecConfig(codec="none"),
    CodecConfig(codec="none", byte_shuffle=False),
    CodecConfig(level=5),
]


class FakeClock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- versions and keys -------------------------------------------------------------


def test_next_version_is_monotonic_when_the_clock_steps_back_or_stalls() -> None:
    v1 = next_version(None, 5_000)
    v2 = next_version(v1, 5_000)  # same millisecond
    v3 = next_version(v2, 4_000)  # clock stepped back
    v4 = next_version(v3, 6_000)
    assert [v1, v2, v3, v4] == [
        Version(5_000, 0),
        Version(5_000, 1),
        Version(5_000, 2),
        Version(6_000, 0),
    ]
    assert v1 < v2 < v3 < v4


def test_version_text_round_trips_and_bad_text_is_refused() -> None:
    assert Version.parse(str(Version(17, 3))) == Version(17, 3)
    for bad in ("17", "a.b", "-1.0", "1.2.3"):
        with pytest.raises(ValueError):
            Version.parse(bad)


def test_snapshot_key_round_trips_with_underscores_in_the_model_id() -> None:
    key = SnapshotKey("org/Smol_LM2_135M", 12, prefix_hash([1, 2, 3]))
    assert str(key) == f"org/Smol_LM2_135M_12_{key.prefix_hash}"
    assert SnapshotKey.parse(str(key)) == key


@pytest.mark.parametrize(
    ("model_id", "layer", "digest"),
    [
        ("", 0, "ab"),
        ("a@b", 0, "ab"),
        ("a b", 0, "ab"),
        ("m", -1, "ab"),
        ("m", 0, "AB"),
        ("m", 0, ""),
    ],
)
def test_snapshot_key_refuses_bad_parts(model_id: str, layer: int, digest: str) -> None:
    with pytest.raises(ValueError):
        SnapshotKey(model_id, layer, digest)


def test_prefix_hash_depends_on_every_token_and_on_order() -> None:
    base = prefix_hash([101, 2023, 2003])
    assert len(base) == 32
    assert base == prefix_hash(np.array([101, 2023, 2003], dtype=np.int32))
    assert base != prefix_hash([101, 2023, 2004])
    assert base != prefix_hash([2023, 101, 2003])
    assert base != prefix_hash([101, 2023])


# -- codec ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: f"{c.compression}-{c.level}")
@pytest.mark.parametrize("dtype", ["float16", "float32", "int8", "int64"])
def test_codec_round_trips_exactly(codec: CodecConfig, dtype: str) -> None:
    tensor = (RNG.standard_normal((2, 3, 17, 8)) * 50).astype(dtype)
    meta, payload = encode(tensor, codec, version=Version(1), model_version="m1")
    assert meta.compression == codec.compression
    assert (meta.dtype, meta.shape, meta.payload_bytes) == (dtype, (2, 3, 17, 8), len(payload))
    out = decode(payload, meta)
    assert out.dtype == tensor.dtype
    np.testing.assert_array_equal(out, tensor)
    assert not out.flags.writeable


def test_codec_handles_empty_and_big_endian_tensors() -> None:
    empty = np.zeros((2, 0, 4), dtype=np.float32)
    meta, payload = encode(empty, CodecConfig(), version=Version(1), model_version="m")
    assert decode(payload, meta).shape == (2, 0, 4)
    big = np.arange(12, dtype=">f4").reshape(3, 4)
    meta, payload = encode(big, CodecConfig(), version=Version(1), model_version="m")
    np.testing.assert_array_equal(decode(payload, meta), big)


def test_codec_refuses_object_arrays() -> None:
    with pytest.raises(TypeError):
        encode(np.array([object()]), CodecConfig(), version=Version(1), model_version="m")


def test_shuffled_zstd_compresses_smooth_fp16_better_than_plain_zstd() -> None:
    t = np.sin(np.arange(64 * 1024, dtype=np.float32) / 300).astype(np.float16)
    _, shuffled = encode(t, CodecConfig(), version=Version(1), model_version="m")
    _, plain = encode(t, CodecConfig(byte_shuffle=False), version=Version(1), model_version="m")
    assert len(shuffled) < len(plain) < t.nbytes


def test_a_flipped_byte_fails_the_checksum() -> None:
    tensor = RNG.standard_normal((4, 64)).astype(np.float32)
    meta, payload = encode(tensor, CodecConfig(codec="none"), version=Version(1), model_version="m")
    broken = bytearray(payload)
    broken[100] ^= 0x01
    with pytest.raises(SnapshotCorruptError) as info:
        decode(bytes(broken), meta)
    assert info.value.reason == "checksum"


def test_a_flipped_byte_in_a_zstd_payload_is_rejected() -> None:
    tensor = RNG.standard_normal((64, 64)).astype(np.float16)
    meta, payload = encode(tensor, CodecConfig(), version=Version(1), model_version="m")
    broken = bytearray(payload)
    broken[len(broken) // 2] ^= 0x40
    with pytest.raises(SnapshotCorruptError) as info:
        decode(bytes(broken), meta)
    assert info.value.reason in ("checksum", "decode")


def test_a_zstd_frame_declaring_another_size_is_rejected_before_decompression() -> None:
    tensor = np.ones((8, 8), dtype=np.float32)
    meta, _ = encode(tensor, CodecConfig(), version=Version(1), model_version="m")
    other = zstandard.ZstdCompressor().compress(b"\0" * (meta.raw_bytes * 1000))
    forged = type(meta)(**{**meta.__dict__, "payload_bytes": len(other)})
    with pytest.raises(SnapshotCorruptError) as info:
        decode(other, forged)
    assert info.value.reason == "size"


def test_a_truncated_payload_or_unknown_compression_is_rejected() -> None:
    tensor = np.ones((8, 8), dtype=np.float32)
    meta, payload = encode(tensor, CodecConfig(), version=Version(1), model_version="m")
    with pytest.raises(SnapshotCorruptError) as info:
        decode(payload[:-1], meta)
    assert info.value.reason == "size"
    odd = type(meta)(**{**meta.__dict__, "compression": "lzma"})
    with pytest.raises(SnapshotCorruptError) as info:
        decode(payload, odd)
    assert info.value.reason == "header"


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_fp16_storage_halves_the_bytes_and_reads_back_float32(codec: str) -> None:
    config = CodecConfig(codec=codec, store_dtype="float16")  # type: ignore[arg-type]
    tensor = (RNG.standard_normal((2, 3, 64, 64)) * 8).astype(np.float32)
    meta, payload = encode(tensor, config, version=Version(1), model_version="m")
    assert meta.compression == config.compression + "+f16"
    assert meta.dtype == "float32" and meta.raw_bytes == tensor.nbytes
    if codec == "none":
        assert len(payload) == tensor.nbytes // 2
    out = decode(payload, meta)
    assert out.dtype == np.float32 and not out.flags.writeable
    # Exactly the float16 rounding of every element: nothing else is lost or changed.
    np.testing.assert_array_equal(out, tensor.astype(np.float16).astype(np.float32))
    # Lossy: half keeps 11 significant bits, so the relative error is at most 2^-11.
    assert np.abs(out - tensor).max() > 0
    np.testing.assert_allclose(out, tensor, rtol=2.0**-11, atol=2.0**-24)


def test_fp16_storage_keeps_full_precision_when_half_would_overflow_or_for_other_dtypes() -> None:
    config = CodecConfig(codec="none", store_dtype="float16")
    wide = np.array([[1.0, 70000.0]], dtype=np.float32)  # 70000 > float16's 65504
    meta, payload = encode(wide, config, version=Version(1), model_version="m")
    assert meta.compression == "none" and len(payload) == wide.nbytes
    np.testing.assert_array_equal(decode(payload, meta), wide)
    nan = np.array([1.0, np.nan], dtype=np.float32)
    meta, _ = encode(nan, config, version=Version(1), model_version="m")
    assert meta.compression == "none"
    ints = np.arange(6, dtype=np.int32)
    meta, payload = encode(ints, config, version=Version(1), model_version="m")
    assert meta.compression == "none"
    np.testing.assert_array_equal(decode(payload, meta), ints)


def test_fp16_labels_that_do_not_fit_the_payload_are_corrupt() -> None:
    config = CodecConfig(codec="none", store_dtype="float16")
    tensor = np.ones((4, 8), dtype=np.float32)
    meta, payload = encode(tensor, config, version=Version(1), model_version="m")
    for label in ("none+f16+shuffle", "none+f16+f16", "none+half"):
        odd = type(meta)(**{**meta.__dict__, "compression": label})
        with pytest.raises(SnapshotCorruptError) as info:
            decode(payload, odd)
        assert info.value.reason == "header", label
    # The label without +f16 expects twice the bytes: a size error, never a wrong tensor.
    plain = type(meta)(**{**meta.__dict__, "compression": "none"})
    with pytest.raises(SnapshotCorruptError) as info:
        decode(payload, plain)
    assert info.value.reason == "size"
    # +f16 is only defined on float32 tensors.
    int_meta = type(meta)(**{**meta.__dict__, "dtype": "int32"})
    with pytest.raises(SnapshotCorruptError) as info:
        decode(payload, int_meta)
    assert info.value.reason == "header"
    with pytest.raises(ValueError, match="store_dtype"):
        CodecConfig(store_dtype="bfloat16")  # type: ignore[arg-type]


# -- Kafka record format ----------------------------------------------------------------


def test_record_headers_round_trip() -> None:
    tensor = np.ones((2, 3, 5, 4), dtype=np.float16)
    meta, _ = encode(tensor, CodecConfig(), version=Version(99, 2), model_version="rev-7")
    headers = record_headers(meta, 3, 5)
    assert {k for k, _ in headers} >= {
        "version",
        "seq_id",
        "dtype",
        "shape",
        "compression",
        "sha256",
    }
    assert parse_headers(headers) == (meta, 3, 5)
    key = SnapshotKey("m_x", 4, "ab12")
    assert record_key(key, Version(99, 2), 3) == b"m_x_4_ab12@99.2#3"


@pytest.mark.parametrize(
    "change",
    [
        lambda h: [p for p in h if p[0] != "sha256"],
        lambda h: [(k, b"x" if k == "shape" else v) for k, v in h],
        lambda h: [(k, b"7" if k == "chunk" else v) for k, v in h],
        lambda h: [(k, b"\xff" if k == "dtype" else v) for k, v in h],
    ],
    ids=["missing", "bad-shape", "chunk-out-of-range", "not-utf8"],
)
def test_bad_record_headers_are_corrupt(change: object) -> None:
    meta, _ = encode(np.ones(4), CodecConfig(), version=Version(1), model_version="m")
    headers = change(record_headers(meta, 0, 2))  # type: ignore[operator]
    with pytest.raises(SnapshotCorruptError) as info:
        parse_headers(headers)
    assert info.value.reason == "header"


def test_store_config_refuses_records_too_small_for_headers() -> None:
    with pytest.raises(ValueError):
        KafkaStoreConfig(bootstrap="127.0.0.1:1", max_record_bytes=4096)
    assert KafkaStoreConfig(bootstrap="127.0.0.1:1").chunk_bytes < 1_000_000


# -- cache ---------------------------------------------------------------------------


def test_lru_evicts_the_least_recently_used_within_the_byte_budget() -> None:
    cache: ByteLRUCache[str, str] = ByteLRUCache(max_bytes=300)
    for name in ("a", "b", "c"):
        assert cache.put(name, name.upper(), 100)
    assert cache.get("a") == "A"  # now b is the least recently used
    assert cache.put("d", "D", 100)
    assert [k for k in "abcd" if k in cache] == ["a", "c", "d"]
    assert cache.nbytes == 300
    assert cache.put("e", "E", 250)  # needs three evictions: c, a, d
    assert len(cache) == 1 and cache.get("e") == "E"
    assert cache.evicted == {"lru": 4}


def test_a_value_over_the_budget_is_not_cached_and_evicts_nothing() -> None:
    cache: ByteLRUCache[str, str] = ByteLRUCache(max_bytes=100)
    cache.put("a", "A", 60)
    assert not cache.put("big", "B", 101)
    assert cache.get("a") == "A" and "big" not in cache
    assert cache.evicted == {}


def test_ttl_expires_entries_by_age_with_an_injected_clock() -> None:
    clock = FakeClock()
    cache: ByteLRUCache[str, str] = ByteLRUCache(max_bytes=1000, ttl_s=10.0, clock=clock)
    cache.put("old", "O", 10)
    clock.now += 6
    cache.put("new", "N", 10)
    clock.now += 3
    assert cache.get("old") == "O"  # 9 s old: still fresh, and reading does not renew it
    clock.now += 1
    assert cache.get("old") is None  # 10 s old
    assert cache.get("new") == "N"
    clock.now += 6
    assert cache.expire() == 1
    assert len(cache) == 0 and cache.nbytes == 0
    assert cache.evicted == {"ttl": 2}


def test_expired_entries_go_before_lru_victims_on_put() -> None:
    clock = FakeClock()
    cache: ByteLRUCache[str, str] = ByteLRUCache(max_bytes=200, ttl_s=5.0, clock=clock)
    cache.put("stale", "S", 100)
    clock.now += 4
    cache.put("fresh", "F", 100)
    clock.now += 2
    cache.put("next", "X", 100)
    assert "fresh" in cache and "next" in cache
    assert cache.evicted == {"ttl": 1}
