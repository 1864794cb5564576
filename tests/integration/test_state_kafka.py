"""The Kafka snapshot store on a real broker: processes, cache, crashes, compaction.

The crash and compaction tests run on a broker of their own (this module starts
and kills it), never on the session broker other tests share.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from flinkai.kafka.admin import consume_all, end_offsets
from flinkai.kafka.broker import LocalKafka, free_port
from flinkai.state import (
    KafkaSnapshotStore,
    KafkaStoreConfig,
    ReopeningStore,
    SnapshotKey,
    StoreNotOpenError,
    StoreUnavailableError,
    Version,
    prefix_hash,
)
from flinkai.testing import unique_topic

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(3)


def kv(tokens: int, dtype: str = "float16") -> np.ndarray:
    return RNG.standard_normal((2, 3, tokens, 64)).astype(dtype)


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def key_of(record_key: bytes | None) -> str:
    return (record_key or b"").decode()


# -- two worker processes -----------------------------------------------------------

_WORKER = """
import hashlib, json, sys
import numpy as np
from flinkai.state import KafkaSnapshotStore, KafkaStoreConfig, SnapshotKey, Version
args = json.loads(sys.argv[1])
config = KafkaStoreConfig(bootstrap=args["bootstrap"], topic=args["topic"], max_record_bytes=256 * 1024)
key = SnapshotKey(*args["key"])
with KafkaSnapshotStore(config) as store:
    if args["role"] == "put":
        tensor = np.random.default_rng(5).standard_normal((2, 3, 2000, 64)).astype(np.float16)
        version = store.put(key, tensor, model_version="r1")
        out = {"version": str(version), "sha": hashlib.sha256(tensor.tobytes()).hexdigest()}
    else:
        snap = store.get_version(key, Version.parse(args["version"]), model_version="r1")
        again = store.get(key, model_version="r1")
        out = {"sha": hashlib.sha256(snap.tensor.tobytes()).hexdigest(),
               "latest": str(again.version) if again else None,
               "hits": store.stats.hits, "fetched": store.stats.fetched_bytes, "pid": __import__("os").getpid()}
print(json.dumps(out))
"""


def _worker(args: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_snapshot_put_by_one_process_is_a_hit_in_another(kafka_broker: LocalKafka) -> None:
    topic = unique_topic("state-procs")
    key = ["HuggingFaceTB/SmolLM2-135M", 7, prefix_hash(range(100))]
    base = {"bootstrap": kafka_broker.bootstrap, "topic": topic, "key": key}
    put = _worker({**base, "role": "put"})
    got = _worker({**base, "role": "get", "version": put["version"]})
    assert got["pid"] != os.getpid()
    assert got["sha"] == put["sha"]
    assert got["latest"] == put["version"]
    # Read from the topic (not a local cache): 1.5 MB fp16 spans several records.
    assert got["fetched"] > 256 * 1024 and got["hits"] == 1


def test_a_put_many_that_fails_while_encoding_is_aborted_not_left_open(
    kafka_broker: LocalKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flinkai.state.kafka as store_module

    topic = unique_topic("state-abort")
    config = KafkaStoreConfig(bootstrap=kafka_broker.bootstrap, topic=topic, request_timeout_s=10)
    good, bad = SnapshotKey("m", 0, prefix_hash([1])), SnapshotKey("m", 1, prefix_hash([1]))
    with KafkaSnapshotStore(config) as writer:
        real_encode = store_module.encode

        def flushing_encode(tensor: np.ndarray, *args: Any, **kwargs: Any) -> Any:
            # put_many encodes inside the open transaction; make sure the first
            # snapshot is on the broker before the second one fails to encode.
            if tensor.dtype == object:
                writer._producer.flush(timeout=10)
            return real_encode(tensor, *args, **kwargs)

        monkeypatch.setattr(store_module, "encode", flushing_encode)
        with pytest.raises(TypeError, match="dtype object"):
            writer.put_many(
                [(good, kv(300)), (bad, np.array(["x"], dtype=object))], model_version="r1"
            )
        monkeypatch.undo()
        # Evidence: the first snapshot's records reached the log, uncommitted.
        raw = consume_all(
            kafka_broker.bootstrap,
            topic,
            isolation_level="read_uncommitted",
            timeout_s=10,
            idle_s=0.5,
        )
        assert raw and all(f"{good}@" in key_of(r.key) for r in raw)
        # Aborted, not open: the next put is visible to another store at once.
        v = writer.put(good, kv(10), model_version="r1")
        with KafkaSnapshotStore(replace(config, create_topic=False)) as reader:
            started = time.monotonic()
            assert reader.versions(good) == [v]
            assert time.monotonic() - started < 5
            assert reader.versions(bad) == []


# -- cache -------------------------------------------------------------------------


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cache_evicts_by_bytes_and_age_and_refetches_from_the_topic(
    kafka_broker: LocalKafka,
) -> None:
    clock = FakeMonotonic()
    tensors = [kv(400) for _ in range(3)]  # 307,200 bytes each
    config = KafkaStoreConfig(
        bootstrap=kafka_broker.bootstrap,
        topic=unique_topic("state-cache"),
        cache_max_bytes=2 * tensors[0].nbytes,
        cache_ttl_s=60.0,
    )
    keys = [SnapshotKey("m", i, "ab") for i in range(3)]
    with KafkaSnapshotStore(config, monotonic=clock) as store:
        for k, t in zip(keys, tensors, strict=True):
            store.put(k, t, model_version="r1")
        assert store.stats.evicted == {"lru": 1}  # key 0 went to make room for key 2
        fetched = store.stats.fetched_bytes
        store.get(keys[2])
        assert store.stats.fetched_bytes == fetched  # served from the cache

        got = store.get(keys[0])  # evicted: read back from Kafka
        assert got is not None
        np.testing.assert_array_equal(got.tensor, tensors[0])
        assert store.stats.fetched_bytes > fetched
        assert store.stats.evicted == {"lru": 2}  # key 1 made room for it

        clock.now += 61.0
        fetched = store.stats.fetched_bytes
        got = store.get(keys[2])
        assert got is not None
        np.testing.assert_array_equal(got.tensor, tensors[2])
        assert store.stats.evicted["ttl"] >= 1
        assert store.stats.fetched_bytes > fetched


# -- a broker of this module's own --------------------------------------------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A broker this module may kill; its cleaner checks for work every 200 ms."""
    data_dir = tmp_path_factory.mktemp("state-kafka")
    broker = LocalKafka(
        data_dir,
        port=free_port(),
        properties={"log.cleaner.backoff.ms": "200"},
    )
    broker.start()
    try:
        yield broker
    finally:
        # The test may have replaced the process; the pid file finds the current one.
        LocalKafka(data_dir, port=broker.port).stop()


def _sigkill(broker: LocalKafka) -> int:
    """SIGKILL the broker process, as a crash would; its pid."""
    pid = broker.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while LocalKafka(broker.data_dir, port=broker.port).status().running:
        assert time.monotonic() < deadline, "broker survived SIGKILL"
        time.sleep(0.1)
    return pid


def _restart(broker: LocalKafka) -> int:
    """Start a new broker on the same data dir and port; its pid."""
    fresh = LocalKafka(broker.data_dir, port=broker.port, properties=broker.properties)
    fresh.start()
    pid = fresh.status().pid
    assert pid is not None
    return pid


def test_a_broker_killed_mid_write_leaves_no_torn_or_lost_snapshot(own_broker: LocalKafka) -> None:
    topic = unique_topic("state-crash")
    config = KafkaStoreConfig(
        bootstrap=own_broker.bootstrap,
        topic=topic,
        max_record_bytes=64 * 1024,
        max_versions_per_key=3,
        transactional_id=f"writer-{topic}",
        request_timeout_s=5.0,
    )
    reader_config = KafkaStoreConfig(
        bootstrap=own_broker.bootstrap, topic=topic, create_topic=False
    )
    key = SnapshotKey("m", 0, prefix_hash([9, 9]))
    committed = kv(500)  # 384 KB: several records
    torn = kv(2000)  # 1.5 MB: about 24 records

    writer = KafkaSnapshotStore(config)
    v1 = writer.put(key, committed, model_version="r1")
    v1_records = len(consume_all(own_broker.bootstrap, topic, timeout_s=10, idle_s=0.5))
    assert v1_records > 1

    # Pause the second put once 8 of its records have reached the broker.
    producer = writer._writer()
    send = producer.send
    sent, paused, release = [0], threading.Event(), threading.Event()

    def pausing_send(*args: Any, **kwargs: Any) -> Any:
        future = send(*args, **kwargs)
        sent[0] += 1
        if sent[0] == 8:
            producer.flush(timeout=10)
            paused.set()
            release.wait(60)
        return future

    producer.send = pausing_send
    failure: list[BaseException] = []

    def second_put() -> None:
        try:
            writer.put(key, torn, model_version="r1")
        except BaseException as e:
            failure.append(e)

    thread = threading.Thread(target=second_put, daemon=True)
    thread.start()
    assert paused.wait(60), "the second put never got going"

    # Evidence: part of the open transaction is in the log, visible only uncommitted.
    uncommitted = consume_all(
        own_broker.bootstrap, topic, isolation_level="read_uncommitted", timeout_s=20, idle_s=0.5
    )
    assert len(uncommitted) == v1_records + 8
    committed_view = consume_all(own_broker.bootstrap, topic, timeout_s=10, idle_s=0.5)
    assert len(committed_view) == v1_records
    with KafkaSnapshotStore(reader_config) as reader:
        assert reader.versions(key) == [v1]

    # Crash the broker mid-transaction; the rest of the put meets a dead broker.
    old_pid = _sigkill(own_broker)
    release.set()
    thread.join(60)
    assert not thread.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], StoreUnavailableError), failure
    writer.close()
    # A worker starting while the broker is down runs without the store...
    now = [0.0]
    late = ReopeningStore(
        lambda: KafkaSnapshotStore(reader_config),
        describe=own_broker.bootstrap,
        monotonic=lambda: now[0],
    )
    assert not late.available and late.failed_attempts == 1
    new_pid = _restart(own_broker)
    assert new_pid != old_pid
    # ...and opens it on the first call after the back-off once the broker is back.
    now[0] = late.retry_s
    with pytest.raises(StoreNotOpenError):
        late.versions(key)
    assert late.wait(60), late.failed_attempts
    assert late.versions(key) == [v1]
    late.close()

    # Still open after the restart: readers see v1 only, and are not blocked.
    with KafkaSnapshotStore(reader_config) as reader:
        assert reader.versions(key) == [v1]
        np.testing.assert_array_equal(reader.get_version(key, v1).tensor, committed)

    # A restarted writer with the same transactional id fences the dead one, whose
    # open transaction is aborted; the next put commits after it.
    with KafkaSnapshotStore(config) as writer2:
        v3 = writer2.put(key, committed * 2, model_version="r1")
    after = consume_all(
        own_broker.bootstrap, topic, isolation_level="read_uncommitted", timeout_s=20, idle_s=1.0
    )
    aborted = [
        r for r in after if f"@{v1}#" not in key_of(r.key) and f"@{v3}#" not in key_of(r.key)
    ]
    assert len(aborted) >= 8  # the aborted records stay in the log

    with KafkaSnapshotStore(reader_config) as reader:
        assert reader.versions(key) == [v1, v3]
        np.testing.assert_array_equal(reader.get_version(key, v1).tensor, committed)
        np.testing.assert_array_equal(reader.get_version(key, v3).tensor, committed * 2)
        assert reader.stats.rejected == {}


def test_a_fresh_reader_rebuilds_exactly_the_final_state_after_compaction(
    own_broker: LocalKafka,
) -> None:
    topic = unique_topic("state-compact")
    config = KafkaStoreConfig(
        bootstrap=own_broker.bootstrap,
        topic=topic,
        max_record_bytes=32 * 1024,
        max_versions_per_key=2,
        # Roll segments after 100 ms and clean them soon after. Tombstones are tiny, so
        # the dirty ratio alone would leave a delete uncleaned; max.compaction.lag.ms
        # makes the cleaner take any segment older than it whatever the ratio.
        topic_configs={
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "max.compaction.lag.ms": "100",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    keys = [SnapshotKey("m", layer, prefix_hash([layer])) for layer in range(4)]
    with KafkaSnapshotStore(config) as writer:
        for _ in range(4):
            for k in keys:
                writer.put(k, kv(100), model_version="r1")
        writer.delete(keys[3])
        writer.delete(keys[2], writer.versions(keys[2])[0])
        # Wait past segment.ms, then write once more so the data above sits in closed
        # (cleanable) segments; only the active segment is never cleaned.
        time.sleep(0.3)
        writer.put(SnapshotKey("roll", 0, "00"), kv(1), model_version="r1")
        expected = {
            k: {v: digest(writer.get_version(k, v).tensor) for v in writer.versions(k)}
            for k in keys
        }
    assert [len(expected[k]) for k in keys] == [2, 2, 1, 0]

    # Every put and delete was one transaction, and left one commit marker.
    transactions = 4 * len(keys) + 2 + 1
    written = end_offsets(own_broker.bootstrap, topic)[0] - transactions
    live = {f"{k}@{v}" for k in keys for v in expected[k]}
    deadline = time.monotonic() + 60
    while True:
        present = consume_all(
            own_broker.bootstrap, topic, isolation_level="read_uncommitted", timeout_s=20
        )
        stale = [
            r
            for r in present
            if r.value is not None
            and key_of(r.key).split("#")[0] not in live
            and not key_of(r.key).startswith("roll_")
        ]
        if len(present) < written and not stale:
            break  # evidence: the cleaner removed every superseded and deleted chunk
        assert time.monotonic() < deadline, (
            f"compaction incomplete after 60 s: {len(present)} of {written} records left, "
            f"{len(stale)} of them stale: {[(r.offset, key_of(r.key)[-30:]) for r in stale]}"
        )
        time.sleep(1.0)

    with KafkaSnapshotStore(
        KafkaStoreConfig(bootstrap=own_broker.bootstrap, topic=topic, create_topic=False)
    ) as fresh:
        rebuilt = {
            k: {v: digest(fresh.get_version(k, v).tensor) for v in fresh.versions(k)} for k in keys
        }
        assert fresh.stats.rejected == {}
    assert rebuilt == expected


def test_versions_stay_monotonic_across_writers(kafka_broker: LocalKafka) -> None:
    config = KafkaStoreConfig(bootstrap=kafka_broker.bootstrap, topic=unique_topic("state-writers"))
    key = SnapshotKey("m", 0, "ab")
    far_future = 4_000_000_000_000
    with KafkaSnapshotStore(config, clock_ms=lambda: far_future) as a:
        va = a.put(key, kv(10), model_version="r1")
    # A second writer whose clock is far behind still writes a later version.
    with KafkaSnapshotStore(config, clock_ms=lambda: 1_000) as b:
        vb = b.put(key, kv(10), model_version="r1")
    assert va == Version(far_future, 0) and vb == Version(far_future, 1)
