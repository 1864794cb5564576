"""Token deltas on Kafka: the producer the LLM operator streams with, and a consumer helper.

Each record is JSON ``{id, seq, delta_text, token_ids, finished, finish_reason}``,
keyed by ``id``, written as tokens are produced. The channel is at-least-once: a
restored job decodes a prompt again from its first token and sends its deltas again.
``(id, seq)`` names a delta, so :class:`DeltaAssembler` keeps the first copy of each
and assembles a completion no matter how many times parts of it arrive. The final
completion stays on the job's exactly-once topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkai.kafka.security import ClientSecurity, client_options

__all__ = ["DeltaAssembler", "DeltaProducer", "StreamedCompletion"]


class DeltaProducer:
    """Sends delta records without waiting for each acknowledgement (``acks=1``, lingered).

    Args:
        bootstrap: Brokers.
        topic: The deltas topic.
        security: Client security of the job's Kafka.
    """

    def __init__(self, bootstrap: str, topic: str, security: ClientSecurity | None = None) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=5,
            key_serializer=lambda k: k.encode("utf-8"),
            value_serializer=lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8"),
            **client_options(security),
        )

    def send(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            self._producer.send(self.topic, key=str(r["id"]), value=dict(r))

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)
        self._producer.close(timeout_s)


@dataclass
class StreamedCompletion:
    """A completion assembled from its deltas."""

    id: str
    parts: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    duplicates: int = 0

    @property
    def finished(self) -> bool:
        """Whether the last delta and every one before it have arrived."""
        last = [s for s, p in self.parts.items() if p.get("finished")]
        return bool(last) and all(s in self.parts for s in range(last[0] + 1))

    @property
    def text(self) -> str:
        """The text of the deltas that arrived, in order, up to the first gap."""
        out = []
        seq = 0
        while seq in self.parts:
            out.append(str(self.parts[seq].get("delta_text") or ""))
            seq += 1
        return "".join(out)

    @property
    def token_ids(self) -> list[int]:
        out: list[int] = []
        seq = 0
        while seq in self.parts:
            out.extend(int(t) for t in self.parts[seq].get("token_ids") or [])
            seq += 1
        return out


class DeltaAssembler:
    """Assembles deltas idempotently: the first copy of each ``(id, seq)`` wins."""

    def __init__(self) -> None:
        self.completions: dict[str, StreamedCompletion] = {}

    def add(self, record: Mapping[str, Any]) -> StreamedCompletion:
        """Take one delta record (a decoded JSON value).

        Raises:
            ValueError: The record has no string ``id`` or no non-negative integer ``seq``.
        """
        pid, seq = record.get("id"), record.get("seq")
        if not isinstance(pid, str) or not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"a delta needs a string id and an integer seq >= 0, got {record!r}")
        done = self.completions.setdefault(pid, StreamedCompletion(pid))
        if seq in done.parts:
            done.duplicates += 1
        else:
            done.parts[seq] = record
        return done
