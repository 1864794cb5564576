"""The control-topic trigger on a real broker, with the real exported ONNX model.

The hot-swapping backend polls ``CURRENT`` only every hour here, so only a control
message can make it swap: a new version must not serve before the message and must
serve on the first batch after the listener has handled it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flinkai.backends.hotswap import HotSwappingBackend, artifact_dir_factory
from flinkai.cli import main
from flinkai.config import Config, OnnxConfig
from flinkai.kafka.admin import create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.kafka.errors import BrokerUnavailableError
from flinkai.models.artifacts import ModelArtifacts
from flinkai.models.control import ControlMessage, ControlTopic, live_listeners
from flinkai.models.registry import ModelRegistry

pytestmark = pytest.mark.integration

TEXTS = ["A fox jumps over the lazy dog.", "ok"]
#: Longer than any test: the directory watch must not be what swaps.
NO_POLL_S = 3600.0
WAIT_S = 10.0


def wait_until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture
def registry(tmp_path: Path, model_artifacts: ModelArtifacts) -> ModelRegistry:
    reg = ModelRegistry(tmp_path / "registry")
    reg.publish(model_artifacts.name, model_artifacts.root, version="v1")
    return reg


@pytest.fixture
def serving(
    registry: ModelRegistry, model_artifacts: ModelArtifacts, kafka_broker: LocalKafka, topic: str
) -> Iterator[HotSwappingBackend]:
    config = Config(onnx=OnnxConfig(intra_op_threads=1))
    backend = HotSwappingBackend(
        registry,
        model_artifacts.name,
        artifact_dir_factory(config),
        poll_interval_s=NO_POLL_S,
        control=ControlTopic(kafka_broker.bootstrap, topic),
    )
    backend.load()
    try:
        yield backend
    finally:
        backend.close()


def test_reload_message_swaps_before_the_next_batch(
    serving: HotSwappingBackend,
    registry: ModelRegistry,
    model_artifacts: ModelArtifacts,
    kafka_broker: LocalKafka,
    topic: str,
    tmp_path: Path,
) -> None:
    name = model_artifacts.name
    subscription = serving.control
    assert subscription is not None
    listener = subscription.listener
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v1"

    # The listener started before the topic existed; it must still see this message.
    v2 = registry.publish(name, model_artifacts.root, version="v2")
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v1", "swapped without a trigger"
    create_topics(kafka_broker.bootstrap, [topic])
    produce(kafka_broker.bootstrap, topic, [ControlMessage(name, "v2", v2.sequence).to_json()])
    assert wait_until(lambda: listener.stats.reloads >= 1), listener.stats
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v2"
    assert serving.stats.swaps == 1
    assert listener.stats.connected

    # The CLI path: rollback --notify brings v1 back on the next batch.
    argv = ["registry", "rollback", name, "v1", "--root", str(registry.root)]
    notify = ["--notify", "--topic", topic, "--bootstrap", kafka_broker.bootstrap]
    assert main.main([*argv, *notify]) == 0
    assert wait_until(lambda: listener.stats.reloads >= 2), listener.stats
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v1"
    assert (serving.stats.swaps, listener.stats.bad_messages) == (2, 0)

    serving.close()
    assert serving.control is None
    assert wait_until(lambda: not listener.alive, 3.0)
    assert listener not in live_listeners()


def test_bad_messages_are_counted_and_ignored(
    serving: HotSwappingBackend,
    registry: ModelRegistry,
    model_artifacts: ModelArtifacts,
    kafka_broker: LocalKafka,
    topic: str,
) -> None:
    name = model_artifacts.name
    assert serving.control is not None
    listener = serving.control.listener
    create_topics(kafka_broker.bootstrap, [topic])
    v2 = registry.publish(name, model_artifacts.root, version="v2")
    produce(
        kafka_broker.bootstrap,
        topic,
        [
            b"reload please",
            b'{"model": "%s", "version": "v2"}' % name.encode(),
            ControlMessage("another-model", "x", 1).to_json(),
        ],
    )
    assert wait_until(lambda: listener.stats.messages >= 3), listener.stats
    stats = listener.stats
    assert (stats.bad_messages, stats.ignored, stats.reloads) == (2, 1, 0)
    assert stats.last_bad is not None and "missing field(s) sequence" in stats.last_bad
    assert listener.alive
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v1"

    # Still listening after the bad ones.
    produce(kafka_broker.bootstrap, topic, [ControlMessage(name, "v2", v2.sequence).to_json()])
    assert wait_until(lambda: listener.stats.reloads >= 1), listener.stats
    assert serving.infer_batch(TEXTS)[1] == f"{name}@v2"


def test_produce_wraps_a_broker_that_stops_answering(kafka_broker: LocalKafka, topic: str) -> None:
    """flush() and close() time out on unacknowledged records: one flinkai error, not kafka's."""
    create_topics(kafka_broker.bootstrap, [topic])
    pid = kafka_broker.status().pid
    assert pid is not None
    paused = False

    def values() -> Iterator[bytes]:
        nonlocal paused
        yield b"first"  # the producer is connected and has the topic's metadata
        os.kill(pid, signal.SIGSTOP)  # the session's own broker, resumed below
        paused = True
        yield b"second"

    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnavailableError) as info:
            produce(kafka_broker.bootstrap, topic, values(), timeout_s=1.5)
    finally:
        if paused:
            os.kill(pid, signal.SIGCONT)
    assert kafka_broker.bootstrap in str(info.value) and repr(topic) in str(info.value)
    assert time.monotonic() - started < 15
