"""The SnapshotStore contract, run against every implementation.

``memory`` runs as a fast unit test; ``kafka`` runs the same tests on the real
session broker (marked ``integration``), each on its own topic.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from kafka import KafkaProducer

from flinkai.kafka.broker import LocalKafka
from flinkai.state import (
    CodecConfig,
    InMemorySnapshotStore,
    KafkaSnapshotStore,
    KafkaStoreConfig,
    SnapshotKey,
    SnapshotNotFoundError,
    SnapshotStore,
    Version,
    prefix_hash,
)
from flinkai.state.codec import encode
from flinkai.state.errors import CORRUPT_REASONS, SnapshotCorruptError, SnapshotMismatchError
from flinkai.state.kafka import record_headers, record_key
from flinkai.state.memory import _Stored
from flinkai.testing import unique_topic

KEY = SnapshotKey("HuggingFaceTB/SmolLM2-135M", 3, prefix_hash([1, 2, 3, 4]))
OTHER = SnapshotKey("HuggingFaceTB/SmolLM2-135M", 4, prefix_hash([1, 2, 3, 4]))
RNG = np.random.default_rng(11)


class StepClock:
    """Wall-clock milliseconds that tests set by hand."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms


@dataclass
class Harness:
    """A store plus what the tests need to reach behind its back."""

    store: SnapshotStore
    clock: StepClock
    #: Writes ``payload`` as a new version of a key, as a faulty writer would.
    write_raw: Callable[[SnapshotKey, Version, str, np.ndarray, Callable[[bytes], bytes]], None]


def _flip(payload: bytes) -> bytes:
    broken = bytearray(payload)
    broken[len(broken) // 2] ^= 0x10
    return bytes(broken)


def _memory(codec: CodecConfig, max_versions: int) -> Iterator[Harness]:
    clock = StepClock()
    store = InMemorySnapshotStore(codec, max_versions_per_key=max_versions, clock_ms=clock)

    def write_raw(key, version, model_version, tensor, damage):  # type: ignore[no-untyped-def]
        meta, payload = encode(tensor, codec, version=version, model_version=model_version)
        store._data.setdefault(key, {})[version] = _Stored(meta, damage(payload))

    yield Harness(store, clock, write_raw)
    store.close()


def _kafka(
    request: pytest.FixtureRequest, codec: CodecConfig, max_versions: int
) -> Iterator[Harness]:
    broker: LocalKafka = request.getfixturevalue("kafka_broker")
    clock = StepClock()
    config = KafkaStoreConfig(
        bootstrap=broker.bootstrap,
        topic=unique_topic("state-contract"),
        # Small records, so multi-record snapshots are the normal case here.
        max_record_bytes=64 * 1024,
        codec=codec,
        max_versions_per_key=max_versions,
        request_timeout_s=20.0,
    )
    store = KafkaSnapshotStore(config, clock_ms=clock)
    raw = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=1_000_000)

    def write_raw(key, version, model_version, tensor, damage):  # type: ignore[no-untyped-def]
        meta, payload = encode(tensor, codec, version=version, model_version=model_version)
        payload = damage(payload)
        size = config.chunk_bytes
        chunks = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        for i, chunk in enumerate(chunks):
            raw.send(
                config.topic,
                key=record_key(key, version, i),
                value=chunk,
                headers=record_headers(meta, i, len(chunks)),
            )
        raw.flush(timeout=20)

    yield Harness(store, clock, write_raw)
    raw.close(timeout=5)
    store.close()


IMPLS = ["memory", pytest.param("kafka", marks=pytest.mark.integration)]


@pytest.fixture(params=IMPLS)
def make(request: pytest.FixtureRequest) -> Iterator[Callable[..., Harness]]:
    """A factory of harnesses for the implementation under test; closes what it made."""
    opened: list[Iterator[Harness]] = []

    def factory(codec: CodecConfig | None = None, max_versions: int = 2) -> Harness:
        codec = codec or CodecConfig()
        gen = (
            _memory(codec, max_versions)
            if request.param == "memory"
            else _kafka(request, codec, max_versions)
        )
        opened.append(gen)
        return next(gen)

    yield factory
    for gen in opened:
        for _ in gen:
            pass


def kv(tokens: int = 300, dtype: str = "float16") -> np.ndarray:
    """About 230 KB at fp16: four records at the Kafka harness's 64 KiB."""
    return RNG.standard_normal((2, 3, tokens, 64)).astype(dtype)


def test_put_then_get_returns_an_equal_read_only_tensor(make: Callable[..., Harness]) -> None:
    h = make()
    tensor = kv()
    version = h.store.put(KEY, tensor, model_version="r1")
    got = h.store.get(KEY)
    assert got is not None
    assert (got.key, got.version, got.model_version) == (KEY, version, "r1")
    np.testing.assert_array_equal(got.tensor, tensor)
    assert got.tensor.dtype == np.float16 and not got.tensor.flags.writeable
    tensor[0, 0, 0, 0] = 99  # the caller's array stays the caller's
    assert h.store.get_version(KEY, version).tensor[0, 0, 0, 0] != 99
    assert h.store.get(OTHER) is None
    assert (h.store.stats.hits, h.store.stats.misses) == (1, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize(
    "codec",
    [CodecConfig(), CodecConfig(codec="none", byte_shuffle=False)],
    ids=["zstd+shuffle", "none"],
)
def test_dtypes_codecs_and_empty_tensors_round_trip(
    make: Callable[..., Harness], dtype: str, codec: CodecConfig
) -> None:
    h = make(codec)
    for n, tensor in enumerate([kv(130, dtype), np.zeros((2, 3, 0, 64), dtype=dtype)]):
        key = SnapshotKey("m", n, "ab")
        version = h.store.put(key, tensor, model_version="r1")
        got = h.store.get_version(key, version, dtype=dtype, shape=tensor.shape)
        np.testing.assert_array_equal(got.tensor, tensor)


def test_versions_are_monotonic_per_key_when_the_clock_steps_back(
    make: Callable[..., Harness],
) -> None:
    h = make(max_versions=10)
    made = []
    for ms in (5_000, 5_000, 4_000, 6_000):  # same ms, then back, then forward
        h.clock.ms = ms
        made.append(h.store.put(KEY, kv(20), model_version="r1"))
    assert made == [Version(5_000, 0), Version(5_000, 1), Version(5_000, 2), Version(6_000, 0)]
    assert h.store.versions(KEY) == made
    h.clock.ms = 1_000
    assert h.store.put(OTHER, kv(20), model_version="r1") == Version(1_000, 0)  # per key


def test_get_serves_the_newest_and_get_version_any_kept_one(make: Callable[..., Harness]) -> None:
    h = make(max_versions=3)
    tensors = [kv(50) for _ in range(3)]
    versions = []
    for i, t in enumerate(tensors):
        h.clock.ms += 10
        versions.append(h.store.put(KEY, t, model_version=f"r{i}"))
    got = h.store.get(KEY)
    assert got is not None and got.version == versions[-1]
    for v, t in zip(versions, tensors, strict=True):
        np.testing.assert_array_equal(h.store.get_version(KEY, v).tensor, t)
    with pytest.raises(SnapshotNotFoundError):
        h.store.get_version(KEY, Version(1, 0))


def test_only_the_newest_versions_are_kept(make: Callable[..., Harness]) -> None:
    h = make(max_versions=2)
    versions = []
    for _ in range(4):
        h.clock.ms += 10
        versions.append(h.store.put(KEY, kv(50), model_version="r1"))
    assert h.store.versions(KEY) == versions[-2:]
    with pytest.raises(SnapshotNotFoundError):
        h.store.get_version(KEY, versions[0])


def test_delete_one_version_or_all_and_versions_never_repeat(make: Callable[..., Harness]) -> None:
    h = make(max_versions=3)
    v1 = h.store.put(KEY, kv(50), model_version="r1")
    v2 = h.store.put(KEY, kv(50), model_version="r1")
    h.store.put(OTHER, kv(50), model_version="r1")
    assert h.store.delete(KEY, v2) == 1
    assert h.store.versions(KEY) == [v1]
    got = h.store.get(KEY)
    assert got is not None and got.version == v1
    assert h.store.delete(KEY, v2) == 0
    assert h.store.delete(KEY) == 1
    assert h.store.versions(KEY) == [] and h.store.get(KEY) is None
    assert h.store.delete(KEY) == 0
    assert len(h.store.versions(OTHER)) == 1  # other keys untouched
    v3 = h.store.put(KEY, kv(50), model_version="r1")
    assert v3 > v2


def test_a_mismatched_snapshot_is_refused_with_its_reason_and_an_older_match_served(
    make: Callable[..., Harness],
) -> None:
    h = make(max_versions=3)
    old = kv(40)
    v_old = h.store.put(KEY, old, model_version="r1")
    h.store.put(KEY, kv(40), model_version="r2")
    got = h.store.get(KEY, model_version="r1")
    assert got is not None and got.version == v_old
    np.testing.assert_array_equal(got.tensor, old)
    assert h.store.stats.rejected == {"model_version": 1}

    assert h.store.get(KEY, model_version="r1", dtype="float32") is None
    assert h.store.get(KEY, shape=(2, 3, 41, 64)) is None
    # Checked in order model version, dtype, shape: the r2 version fails on the first.
    assert h.store.stats.rejected == {"model_version": 2, "dtype": 1, "shape": 2}
    assert h.store.stats.misses == 2
    with pytest.raises(SnapshotMismatchError) as info:
        h.store.get_version(KEY, v_old, dtype="float32")
    assert info.value.reason == "dtype"


@pytest.mark.parametrize("codec", [CodecConfig(codec="none"), CodecConfig()], ids=["none", "zstd"])
def test_a_flipped_byte_is_refused_with_its_reason_and_the_older_version_served(
    make: Callable[..., Harness], codec: CodecConfig
) -> None:
    h = make(codec, max_versions=3)
    good = kv()
    v_good = h.store.put(KEY, good, model_version="r1")
    v_bad = Version(v_good.ms + 1, 0)
    h.write_raw(KEY, v_bad, "r1", kv(), _flip)
    assert h.store.versions(KEY) == [v_good, v_bad]  # evidence: the bad version is the newest

    got = h.store.get(KEY, model_version="r1")
    assert got is not None and got.version == v_good
    np.testing.assert_array_equal(got.tensor, good)
    reasons = h.store.stats.rejected
    assert sum(reasons.values()) == 1 and set(reasons) <= set(CORRUPT_REASONS)
    if codec.codec == "none":
        assert reasons == {"checksum": 1}
    with pytest.raises(SnapshotCorruptError):
        h.store.get_version(KEY, v_bad)


def test_a_store_with_only_corrupt_versions_misses(make: Callable[..., Harness]) -> None:
    h = make()
    h.write_raw(KEY, Version(10, 0), "r1", kv(), _flip)
    assert h.store.get(KEY) is None
    assert sum(h.store.stats.rejected.values()) == 1 and h.store.stats.misses == 1


def test_keys_do_not_see_each_others_versions(make: Callable[..., Harness]) -> None:
    h = make()
    keys = [
        SnapshotKey(m, layer, prefix_hash([n]))
        for m, layer, n in itertools.product(("a", "a_b"), (0, 1), (1, 2))
    ]
    tensors = {k: kv(10) for k in keys}
    for k, t in tensors.items():
        h.store.put(k, t, model_version="r1")
    for k, t in tensors.items():
        assert len(h.store.versions(k)) == 1
        got = h.store.get(k)
        assert got is not None
        np.testing.assert_array_equal(got.tensor, t)


def test_put_many_and_get_many_round_trip_in_order_with_misses(
    make: Callable[..., Harness],
) -> None:
    h = make(max_versions=2)
    keys = [SnapshotKey("m", layer, prefix_hash([n])) for layer in range(3) for n in range(4)]
    tensors = [kv(20) for _ in keys]
    versions = h.store.put_many(list(zip(keys, tensors, strict=True)), model_version="r1")
    assert len(versions) == len(keys) and h.store.stats.puts == len(keys)
    absent = SnapshotKey("m", 9, prefix_hash([99]))
    got = h.store.get_many([*keys, absent], model_version="r1", dtype="float16")
    assert got[-1] is None
    for snapshot, key, tensor in zip(got[:-1], keys, tensors, strict=True):
        assert snapshot is not None and snapshot.key == key
        np.testing.assert_array_equal(snapshot.tensor, tensor)
    assert h.store.stats.hits == len(keys) and h.store.stats.misses == 1
    # A second put_many makes new versions, and refuses a key given twice.
    again = h.store.put_many([(keys[0], kv(20))], model_version="r1")
    assert again[0] > versions[0]
    with pytest.raises(ValueError, match="twice"):
        h.store.put_many([(keys[1], kv(4)), (keys[1], kv(4))], model_version="r1")


def test_get_many_refuses_a_flipped_byte_and_serves_the_older_version(
    make: Callable[..., Harness],
) -> None:
    h = make(max_versions=3)
    good = kv()
    v_good = h.store.put_many([(KEY, good)], model_version="r1")[0]
    h.write_raw(KEY, Version(v_good.ms + 1, 0), "r1", kv(), _flip)
    other = kv(30)
    h.store.put(OTHER, other, model_version="r1")
    got = h.store.get_many([KEY, OTHER], model_version="r1")
    assert got[0] is not None and got[0].version == v_good
    np.testing.assert_array_equal(got[0].tensor, good)
    assert got[1] is not None
    np.testing.assert_array_equal(got[1].tensor, other)
    assert sum(h.store.stats.rejected.values()) == 1
    assert set(h.store.stats.rejected) <= set(CORRUPT_REASONS)
