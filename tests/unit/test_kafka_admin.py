"""Kafka helpers without a broker: clear failures, ids, names, pid-file safety."""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flinkai.errors import SetupError
from flinkai.kafka.admin import consume_all, create_topics, produce, wait_for_broker
from flinkai.kafka.broker import LocalKafka, new_cluster_id
from flinkai.kafka.errors import BrokerUnavailableError
from flinkai.local.process import free_port, port_in_use
from flinkai.testing import unique_topic


@pytest.fixture
def dead_bootstrap() -> str:
    """An address where nothing listens."""
    return f"127.0.0.1:{free_port()}"


def test_wait_for_broker_names_the_address(dead_bootstrap: str) -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=dead_bootstrap):
        wait_for_broker(dead_bootstrap, timeout_s=1.0)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "call",
    [
        lambda b: create_topics(b, ["t"], timeout_s=1.0),
        lambda b: produce(b, "t", [b"x"], timeout_s=1.0),
        lambda b: consume_all(b, "t", timeout_s=1.0),
    ],
    ids=["create_topics", "produce", "consume_all"],
)
def test_helpers_fail_clearly_without_broker(
    call: Callable[[str], object], dead_bootstrap: str
) -> None:
    with pytest.raises(BrokerUnavailableError, match=dead_bootstrap):
        call(dead_bootstrap)


def test_cluster_id_has_kafka_format() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_unique_topic_is_unique_and_legal() -> None:
    a, b = unique_topic("test_x[param 1]"), unique_topic("test_x[param 1]")
    assert a != b
    assert a.startswith("test_x-param-1-")
    assert all(c.isalnum() or c in "._-" for c in a)
    assert unique_topic("///").startswith("topic-")


def test_free_port_and_port_in_use() -> None:
    port = free_port()
    assert not port_in_use(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use(port)


def test_missing_jars_say_run_setup(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path / "data", free_port(), jars=tmp_path / "no-jars")
    with pytest.raises(SetupError, match="flinkai setup"):
        broker.start()


def test_not_running_status_and_stop(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path)
    assert not broker.status().running
    assert broker.status().bootstrap is None
    assert broker.stop() is False


def test_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    # A stale pid file whose pid now belongs to another live process (this one).
    (tmp_path / "broker.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "broker.port").write_text("9092\n")
    broker = LocalKafka(tmp_path)
    assert not broker.status().running
    assert broker.stop() is False  # would have SIGTERMed pytest itself otherwise
    assert not (tmp_path / "broker.pid").exists()
