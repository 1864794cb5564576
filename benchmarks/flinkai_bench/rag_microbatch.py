"""The micro-batch reindexer: the RAG bench's baseline for the streaming ingest job.

What a user would build instead of ``jobs/rag_ingest.sql``: a Kafka consumer on the
same documents topic and, every ``interval_s`` seconds, one run that takes the
records that arrived since the last run, keeps the newest event per document (only
changed documents are embedded), and writes them with the very code the job's UDF
uses (:class:`~flinkai.functions.rag_index.DocumentIndexer`: the same chunking, model
and version-guarded upsert into a Chroma collection of the same kind).

Runs are due at fixed ticks ``start + k * interval_s``, as a cron-like scheduler would
start them. A run that overruns its interval starts the next one at the next tick
still ahead (the missed ticks are counted, never run late in a burst).

Visibility is measured outside, by the bench's query probe, exactly as for the job.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkai.config import Config
from flinkai.functions.doc_events import MAX_DOCUMENT_BYTES, DocEvent, DocOp, parse_doc_event

__all__ = [
    "BatchRun",
    "MicroBatchReindexer",
    "latest_per_document",
    "next_tick",
    "visibility",
]

log = logging.getLogger(__name__)


def next_tick(start: float, interval_s: float, now: float) -> float:
    """The first tick ``start + k * interval_s`` (k >= 1) at or after ``now``.

    A run that ended after one or more ticks waits for the next tick ahead, so the
    period stays fixed; ``now`` before the first tick gives the first tick.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    k = max(1, math.ceil((now - start) / interval_s - 1e-9))
    return start + k * interval_s


def ticks_missed(previous: float, scheduled: float, interval_s: float) -> int:
    """Ticks skipped between two runs scheduled at ``previous`` and ``scheduled``."""
    return max(0, round((scheduled - previous) / interval_s) - 1)


def latest_per_document(events: Iterable[DocEvent]) -> list[DocEvent]:
    """The newest event of each document, in order of first arrival.

    A document changed twice since the last run is embedded once, at its newest
    version; an older event arriving after a newer one (out of order) loses.
    """
    newest: dict[str, DocEvent] = {}
    for e in events:
        kept = newest.get(e.doc_id)
        if kept is None or e.version > kept.version:
            newest[e.doc_id] = e
    return list(newest.values())


def visibility(
    sent_at: Mapping[str, float], seen_at: Mapping[str, float]
) -> tuple[list[float], list[str]]:
    """Time to visibility per document (seen - sent, seconds) and the never-seen ids.

    Raises:
        ValueError: A document seen before it was sent (clocks or ids are wrong).
    """
    times: list[float] = []
    unseen: list[str] = []
    for doc_id, sent in sent_at.items():
        seen = seen_at.get(doc_id)
        if seen is None:
            unseen.append(doc_id)
            continue
        if seen < sent:
            raise ValueError(f"{doc_id} seen {sent - seen:.3f} s before it was sent")
        times.append(seen - sent)
    return times, unseen


@dataclass(frozen=True)
class BatchRun:
    """One micro-batch: when it was due, began and ended, and what it wrote."""

    due: float
    began: float
    ended: float
    records: int
    documents: int
    missed_ticks: int


@dataclass
class _State:
    runs: list[BatchRun] = field(default_factory=list)
    indexed_at: dict[str, float] = field(default_factory=dict)
    invalid: int = 0
    errors: list[str] = field(default_factory=list)


class MicroBatchReindexer:
    """Consumes ``topic`` from its end at :meth:`start`; reindexes every ``interval_s``.

    Args:
        config: Its ``rag.collection`` names the collection it writes.
        bootstrap: Kafka bootstrap servers.
        topic: The documents topic (the job's input).
        interval_s: Period of the runs.
    """

    def __init__(self, config: Config, bootstrap: str, topic: str, interval_s: float) -> None:
        self.config = config
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval_s = interval_s
        self.state = _State()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="microbatch")
        self._consumer: Any = None
        self._indexer: Any = None

    def start(self) -> None:
        """Open the model and the index, pin the topic's end offsets, start the timer."""
        from kafka import KafkaConsumer, TopicPartition

        from flinkai.functions.rag_index import DocumentIndexer

        self._indexer = DocumentIndexer(self.config)
        self._indexer.open()
        # Warm up as the job is before its timed documents: model loaded, collection written.
        warm = DocEvent("warm-0", DocOp.UPSERT, 1, "warm-up document")
        errors = [r.error for r in self._indexer.apply([warm]) if r.error]
        if errors:
            raise RuntimeError(f"micro-batch warm-up write failed: {errors[0]}")
        self._consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False
        )
        parts = [
            TopicPartition(self.topic, p) for p in self._consumer.partitions_for_topic(self.topic)
        ]
        self._consumer.assign(parts)
        self._consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the lazy seek now: only records sent after start count
            self._consumer.position(tp)
        self._parts = parts
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._consumer is not None:
            self._consumer.close()
        if self._indexer is not None:
            self._indexer.close()

    def _drain(self) -> list[Any]:
        """Every record up to the end offsets as of now."""
        end = self._consumer.end_offsets(self._parts)
        records: list[Any] = []
        while any(self._consumer.position(tp) < end[tp] for tp in self._parts):
            for batch in self._consumer.poll(timeout_ms=200).values():
                records += batch
        return records

    def _once(self, due: float, missed: int) -> None:
        began = time.time()
        records = self._drain()
        events: list[DocEvent] = []
        for r in records:
            parsed = parse_doc_event(r.key, r.value, r.timestamp, MAX_DOCUMENT_BYTES)
            if isinstance(parsed, DocEvent):
                events.append(parsed)
            else:
                self.state.invalid += 1
        changed = latest_per_document(events)
        if changed:
            results = self._indexer.apply(changed)
            self.state.errors += [r.error for r in results if r.error]
        ended = time.time()
        for e in changed:
            self.state.indexed_at.setdefault(e.doc_id, ended)
        self.state.runs.append(BatchRun(due, began, ended, len(records), len(changed), missed))

    def _run(self) -> None:
        start = time.time()
        due = next_tick(start, self.interval_s, start)
        previous = start
        while not self._stop.wait(max(0.0, due - time.time())):
            try:
                self._once(due, ticks_missed(previous, due, self.interval_s))
            except Exception as e:  # reported in the result; the bench must not hang
                log.warning("micro-batch run failed: %s", e)
                self.state.errors.append(f"run failed: {e}")
            previous = due
            due = next_tick(start, self.interval_s, time.time())
