"""ReopeningStore: a store that is down at start is a counted miss, never a failure."""

from __future__ import annotations

import logging
import re
import time

import numpy as np
import pytest

from flinkai.config import Config
from flinkai.errors import ConfigError
from flinkai.functions.llm import LlmCompleteFunction, build_store
from flinkai.local.process import free_port
from flinkai.state import (
    InMemorySnapshotStore,
    KafkaSnapshotStore,
    KafkaStoreConfig,
    ReopeningStore,
    SnapshotKey,
    SnapshotStore,
    StoreNotOpenError,
    StoreUnavailableError,
)
from tests.unit.test_llm_function import FakeModel

KEY = SnapshotKey("m", 0, "ab" * 16)


class Opener:
    """Fails ``failures`` times, then opens an in-memory store."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> SnapshotStore:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailableError(f"broker down (attempt {self.calls})")
        return InMemorySnapshotStore()


def test_a_store_down_at_start_fails_fast_and_is_retried_after_the_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    opener = Opener(failures=2)
    with caplog.at_level(logging.WARNING, logger="flinkai.state.reopening"):
        store = ReopeningStore(
            opener, describe="Kafka 127.0.0.1:1", retry_s=30, monotonic=lambda: now[0]
        )
        # Evidence of the fault: the first attempt failed, the store is not open.
        assert opener.calls == 1 and store.failed_attempts == 1 and not store.available
        for _ in range(3):  # within the back-off: no new attempt, an immediate error
            with pytest.raises(StoreNotOpenError, match=re.escape("127.0.0.1:1")):
                store.get_many([KEY])
        assert store.wait(5) is False and opener.calls == 1
        now[0] = 30.0  # back-off over: the next call starts one background attempt
        with pytest.raises(StoreNotOpenError):
            store.put(KEY, np.ones(4, np.float32), model_version="r1")
        assert store.wait(5) is False and opener.calls == 2  # still down
        now[0] = 60.0
        with pytest.raises(StoreNotOpenError):
            store.get(KEY)
        assert store.wait(5) is True and opener.calls == 3
    version = store.put(KEY, np.ones(4, np.float32), model_version="r1")
    got = store.get(KEY, model_version="r1")
    assert got is not None and got.version == version and store.stats.hits == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # One warning when it went down, one when it came back; none per call.
    assert len(warnings) == 2, warnings
    assert "Kafka 127.0.0.1:1" in warnings[0] and "retrying every 30s" in warnings[0]
    assert "is open after 2 failed attempts" in warnings[1]
    store.close()
    with pytest.raises(StoreNotOpenError):
        store.get(KEY)


def test_a_config_error_at_start_is_not_retried() -> None:
    def bad() -> SnapshotStore:
        raise ConfigError("kafka.security.password: $NOPE is not set")

    with pytest.raises(ConfigError, match="NOPE"):
        ReopeningStore(bad, describe="x")


def test_kafka_store_on_an_unreachable_port_fails_in_bounded_time() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=re.escape(f"unreachable at {bootstrap}")):
        KafkaSnapshotStore(KafkaStoreConfig(bootstrap=bootstrap, request_timeout_s=2.0))
    assert time.monotonic() - started < 5


def test_llm_complete_runs_without_the_store_and_counts_store_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    config = Config().with_overrides(
        kafka={"bootstrap_servers": bootstrap},
        llm={"store": "kafka", "block_tokens": 8, "max_new_tokens": 4},
    )
    counted: list[tuple[str, int]] = []
    with caplog.at_level(logging.WARNING):
        store = build_store(config)
        assert isinstance(store, ReopeningStore) and not store.available
        fn = LlmCompleteFunction(
            config, FakeModel(), store, count_miss=lambda r, n: counted.append((r, n))
        )
        rows = [fn(f"prompt number {i} with enough bytes for blocks") for i in range(3)]
    # Output is produced, from the decoder alone.
    assert all(r.error is None and r.completion for r in rows)
    assert [r.cached_tokens for r in rows] == [0, 0, 0]
    stats = fn.prefix.stats
    assert stats.lookups == 3 and stats.hits == 0 and stats.published_blocks == 0
    # Each prompt: one failed lookup and one failed publish, both store_unavailable.
    assert stats.store_errors == {"store_unavailable": 6}
    assert sum(n for r, n in counted if r == "store_unavailable") == 6
    assert {r for r, _ in counted} == {"store_unavailable"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum(bootstrap in w and "unavailable" in w for w in warnings) >= 1
    # The store warns once; the prefix cache once per run of the same reason.
    assert len(warnings) <= 2, warnings
    fn.close()


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


class _Group:
    """A Flink metric group's add_group/counter, recording what was registered."""

    def __init__(self, path: tuple[str, ...] = ()) -> None:
        self.path = path
        self.counters: dict[tuple[str, ...], _Counter] = {}

    def add_group(self, name: str, value: str) -> _Group:
        child = _Group((*self.path, name, value))
        child.counters = self.counters
        return child

    def counter(self, name: str) -> _Counter:
        return self.counters.setdefault((*self.path, name), _Counter())


def test_prefix_misses_are_one_counter_per_reason_label() -> None:
    from flinkai import metrics

    group = _Group()
    inc = metrics.labelled_counter(group, metrics.LLM_PREFIX_MISSES, "reason")
    inc("store_unavailable", 2)
    inc("checksum", 1)
    inc("store_unavailable", 3)
    assert {k: c.value for k, c in group.counters.items()} == {
        ("reason", "store_unavailable", "llm_prefix_misses"): 5,
        ("reason", "checksum", "llm_prefix_misses"): 1,
    }
    assert metrics.METRICS["llm_prefix_misses"].kind == "counter"
