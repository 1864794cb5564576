"""Helpers for tests of flinkai and of jobs built on it.

Shipped inside the package so downstream projects get the same real-broker
fixtures as flinkai's own suite::

    @pytest.fixture(scope="session")
    def kafka_broker():
        with session_broker() as broker:
            yield broker

It also holds the exact exactly-once checker the fault tests use. After the job's
last commit, read each output topic to its end offsets and compare the ids found
with the ids sent::

    snapshot = read_to_end_offsets(bootstrap, output_topic)   # read_committed
    check_exactly_once(expected_ids, snapshot.records).assert_ok()

The contract it checks: the committed output, read to the last stable offset of
every partition, is the expected multiset of ids. Every id as often as expected
(once, for unique ids): no duplicate, no loss, nothing unexpected. Order is not part
of it: Kafka orders records only within a partition, and records of different keys
or partitions may be committed in any order, so a reordered output passes.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flinkai.kafka.admin import Record, TopicSnapshot, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port

if TYPE_CHECKING:
    from flinkai.config import Config
    from flinkai.runtime.environment import Target
    from flinkai.runtime.runner import RunResult

__all__ = [
    "EmbedJob",
    "ExactlyOnceReport",
    "TopicSnapshot",
    "check_exactly_once",
    "compare_ids",
    "dead_letter_id",
    "read_to_end_offsets",
    "result_id",
    "session_broker",
    "start_session_broker",
    "unique_topic",
]

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
    # Its log end offsets on a Prometheus endpoint, as a deployed cluster serves them.
    options.setdefault("metrics_port", free_port())
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


#: How many example ids a failure message lists per category.
_EXAMPLES = 10


@dataclass(frozen=True)
class ExactlyOnceReport:
    """How a multiset of ids seen in the output differs from the one expected.

    Attributes:
        expected: How many records were expected (with multiplicity).
        seen: How many records were read.
        duplicated: Expected id -> copies seen beyond those expected.
        missing: Expected id -> copies expected but not seen.
        unexpected: Id that was never expected -> copies seen.
    """

    expected: int
    seen: int
    duplicated: dict[str, int]
    missing: dict[str, int]
    unexpected: dict[str, int]

    @property
    def ok(self) -> bool:
        """Whether the output is exactly the expected multiset."""
        return not (self.duplicated or self.missing or self.unexpected)

    def __str__(self) -> str:
        head = f"expected {self.expected} records, read {self.seen}"
        if self.ok:
            return f"{head}: exactly once"
        parts = [head]
        for name, ids in (
            ("duplicated", self.duplicated),
            ("missing", self.missing),
            ("unexpected", self.unexpected),
        ):
            if ids:
                shown = ", ".join(f"{k} x{n}" for k, n in sorted(ids.items())[:_EXAMPLES])
                more = f", ... ({len(ids) - _EXAMPLES} more)" if len(ids) > _EXAMPLES else ""
                parts.append(f"{len(ids)} {name} id(s): {shown}{more}")
        return "; ".join(parts)

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` naming the offending ids unless the output is exact."""
        if not self.ok:
            raise AssertionError(str(self))


def compare_ids(expected: Counter[str] | Iterable[str], seen: Iterable[str]) -> ExactlyOnceReport:
    """Compare the ids read from an output with the ids expected, as multisets.

    Args:
        expected: Ids that must appear; an iterable counts repeats, a ``Counter``
            gives each id's count directly.
        seen: Ids read from the output, in any order.

    Returns:
        The differences; order never counts (see the module docstring).
    """
    want = expected if isinstance(expected, Counter) else Counter(expected)
    got = Counter(seen)
    duplicated = {k: got[k] - n for k, n in want.items() if got[k] > n}
    missing = {k: n - got[k] for k, n in want.items() if got[k] < n}
    unexpected = {k: n for k, n in got.items() if k not in want}
    return ExactlyOnceReport(
        expected=sum(want.values()),
        seen=sum(got.values()),
        duplicated=duplicated,
        missing=missing,
        unexpected=unexpected,
    )


def result_id(record: Record) -> str:
    """The ``user_id`` field of a JSON result record (the embed jobs' event id)."""
    return str(json.loads(record.value or b"null")["user_id"])


def dead_letter_id(record: Record) -> str:
    """``<source_topic>:<source_partition>:<source_offset>`` of a dead-letter record.

    Poison events carry no id of their own; their place in the input names them.
    """
    value = json.loads(record.value or b"null")
    return f"{value['source_topic']}:{value['source_partition']}:{value['source_offset']}"


def check_exactly_once(
    expected: Counter[str] | Iterable[str],
    records: Iterable[Record],
    id_of: Callable[[Record], str] = result_id,
) -> ExactlyOnceReport:
    """Compare output records with the expected ids; see :func:`compare_ids`.

    ``records`` must be complete: read them with :func:`read_to_end_offsets` after
    the job's last commit, not up to a record count.

    Args:
        expected: The ids that must each appear (a ``Counter`` for repeated ids).
        records: Every record of the output topic.
        id_of: What identifies a record: :func:`result_id` (default) or
            :func:`dead_letter_id`.

    Returns:
        The report; call :meth:`ExactlyOnceReport.assert_ok` to fail a test on it.
    """
    return compare_ids(expected, (id_of(r) for r in records))


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
        # On a remote target the runner makes the TaskManagers run the UDF workers.
        options = RunOptions(target=self.target, variables=variables, wait=False)
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
