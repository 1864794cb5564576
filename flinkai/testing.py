"""Helpers for tests of flinkai and of jobs built on it.

Shipped inside the package so downstream projects get the same real-broker
fixtures as flinkai's own suite::

    @pytest.fixture(scope="session")
    def kafka_broker():
        with session_broker() as broker:
            yield broker
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flinkai.kafka.broker import LocalKafka, free_port

if TYPE_CHECKING:
    from flinkai.config import Config
    from flinkai.runtime.environment import Target
    from flinkai.runtime.runner import RunResult

__all__ = ["EmbedJob", "session_broker", "start_session_broker", "unique_topic"]

log = logging.getLogger(__name__)

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


def _default_config() -> Config:
    from flinkai.config import load_config

    return load_config(env={})


def _local_target() -> Target:
    from flinkai.runtime.environment import Target

    return Target()


@dataclass
class EmbedJob:
    """An embed job (``jobs/embed_clicks.sql`` or alike) on fresh topics, submitted detached.

    Fault tests and the recovery benchmark share it: unbounded source, unique
    input/output/DLQ topics and consumer group per run.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        script: The SQL script; it takes the ``CLICKS_TOPIC`` / ``EMBEDDINGS_TOPIC`` /
            ``DLQ_TOPIC`` / ``GROUP_ID`` / ``SCAN_BOUNDED_MODE`` placeholders.
        config: flinkai config for the run.
        target: Where it runs; on a remote cluster the UDF workers run there too.
        prefix: Prepended to topic names (tells runs apart in broker listings).
    """

    bootstrap: str
    script: Path
    config: Config = field(default_factory=_default_config)
    target: Target = field(default_factory=_local_target)
    prefix: str = ""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    result: RunResult | None = None

    @property
    def topics(self) -> tuple[str, str, str]:
        """(input, output, dead-letter) topic names."""
        p, r = self.prefix, self.run_id
        return (f"{p}in-{r}", f"{p}out-{r}", f"{p}dlq-{r}")

    @property
    def job_id(self) -> str:
        from flinkai.errors import SetupError

        if self.result is None or not self.result.job_id:
            raise SetupError("the job has not started")
        return self.result.job_id

    def start(self) -> None:
        """Create the topics and submit the job; returns once it is submitted."""
        from flinkai.kafka.admin import create_topics
        from flinkai.runtime.cluster import python_workers_on_cluster
        from flinkai.runtime.runner import RunOptions, run_script

        create_topics(self.bootstrap, list(self.topics))
        variables = {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "CLICKS_TOPIC": self.topics[0],
            "EMBEDDINGS_TOPIC": self.topics[1],
            "DLQ_TOPIC": self.topics[2],
            "GROUP_ID": f"g-{self.run_id}",
            "SCAN_BOUNDED_MODE": "unbounded",
        }
        options = RunOptions(target=self.target, variables=variables, wait=False)
        if self.target.is_local:
            self.result = run_script(self.script, self.config, options)
        else:
            # UDF workers must run on the TaskManager, or killing it would not touch them.
            with python_workers_on_cluster():
                self.result = run_script(self.script, self.config, options)

    def cancel(self) -> None:
        """Cancel the job if it runs; a job that already ended is left as it is."""
        client = self.result.job_client if self.result is not None else None
        if client is None:
            return
        try:
            client.cancel().result()
        except Exception as e:  # Py4J error: a job that already ended cannot be cancelled
            log.warning("cancelling job %s: %s", self.run_id, type(e).__name__)
