"""Helpers for tests of flinkai and of jobs built on it.

Shipped inside the package so downstream projects get the same real-broker
fixtures as flinkai's own suite::

    @pytest.fixture(scope="session")
    def kafka_broker():
        with session_broker() as broker:
            yield broker
"""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flinkai.kafka.broker import LocalKafka, free_port

__all__ = ["session_broker", "start_session_broker", "unique_topic"]

#: Kafka's limit is 249 characters; names stay far shorter so logs remain readable.
_MAX_PREFIX = 60
_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]+")


def unique_topic(prefix: str = "test") -> str:
    """A topic name no other test (or earlier run against the same broker) uses.

    Args:
        prefix: Readable part, e.g. the test name; characters Kafka does not
            allow in topic names become ``-``.

    Returns:
        ``<prefix>-<10 hex digits>``.
    """
    clean = _ILLEGAL.sub("-", prefix).strip("-.")[:_MAX_PREFIX] or "topic"
    return f"{clean}-{uuid.uuid4().hex[:10]}"


def start_session_broker(data_dir: str | Path, **options: Any) -> LocalKafka:
    """Start a broker on a free port in ``data_dir``; the caller stops it.

    Args:
        data_dir: Folder for the broker's files (a fresh temp dir in tests).
        **options: Further :class:`~flinkai.kafka.broker.LocalKafka` arguments.

    Returns:
        The running broker; ``.bootstrap`` is its ``127.0.0.1:PORT``.

    Raises:
        SetupError: Jars missing (the message says to run ``flinkai setup``), or the
            broker did not start.
    """
    options.setdefault("port", free_port())
    broker = LocalKafka(data_dir, **options)
    broker.start()
    return broker


@contextmanager
def session_broker(data_dir: str | Path | None = None, **options: Any) -> Iterator[LocalKafka]:
    """A running broker for the duration of the ``with`` block.

    Args:
        data_dir: Folder for the broker's files; ``None`` uses a temp dir that is
            deleted afterwards.
        **options: Further :class:`~flinkai.kafka.broker.LocalKafka` arguments.

    Yields:
        The running broker.
    """
    if data_dir is None:
        folder, owned = Path(tempfile.mkdtemp(prefix="flinkai-kafka-")), True
    else:
        folder, owned = Path(data_dir), False
    try:
        broker = start_session_broker(folder, **options)
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
