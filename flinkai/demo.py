"""The Quick start: local Kafka, sample events, the embed job on the MiniCluster, results.

Shows the whole main path on one machine and proves no event is lost: every
produced event is either an embedding on the result topic or a dead letter.
"""

from __future__ import annotations

import base64
import collections
import json
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from flinkai.config import Config
from flinkai.errors import FlinkAIError
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.runtime.runner import RunOptions, run_script

__all__ = ["DemoReport", "poison_events", "run_demo", "sample_events"]


def sample_events() -> list[bytes]:
    """The click events shipped with the package."""
    text = resources.files("flinkai.data").joinpath("sample_clicks.jsonl").read_text("utf-8")
    return [line.encode() for line in text.splitlines() if line.strip()]


def poison_events(max_text_bytes: int) -> list[tuple[str, bytes]]:
    """One bad event per failure class the job must dead-letter, with the expected reason."""
    ok = {"user_id": "u999", "event_time": "2026-12-01T12:00:00Z"}
    return [
        ("not_json", b"this is not json"),
        ("missing_field", json.dumps({"user_id": "u999", "click_text": "no time"}).encode()),
        ("empty_text", json.dumps({**ok, "click_text": "   "}).encode()),
        ("oversized_text", json.dumps({**ok, "click_text": "x" * (max_text_bytes + 1)}).encode()),
        ("invalid_utf8", b'{"user_id": "u999", "click_text": "caf\xe9", "event_time": 1}'),
    ]


@dataclass(frozen=True)
class DemoReport:
    """What the demo produced and found."""

    produced: int
    embedded: list[dict[str, object]]
    dead_letters: list[dict[str, object]]
    job_seconds: float
    topics: tuple[str, str, str]

    @property
    def accounted(self) -> bool:
        return len(self.embedded) + len(self.dead_letters) == self.produced


def run_demo(
    config: Config,
    bootstrap: str,
    script: Path,
    events: list[bytes] | None = None,
    run_id: str | None = None,
    variables: dict[str, str] | None = None,
    udf_dirs: tuple[Path, ...] = (),
) -> DemoReport:
    """Produce events, run the embed job bounded, read back both output topics."""
    run_id = run_id or uuid.uuid4().hex[:8]
    topics = (f"clicks-{run_id}", f"click-embeddings-{run_id}", f"click-embeddings-dlq-{run_id}")
    create_topics(bootstrap, list(topics))
    if events is None:
        events = sample_events() + [p for _, p in poison_events(config.embedding.max_text_bytes)]
    produce(bootstrap, topics[0], events)
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "CLICKS_TOPIC": topics[0],
        "EMBEDDINGS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        # Bounded: read what is there now, then finish, so the demo ends by itself.
        "SCAN_BOUNDED_MODE": "latest-offset",
        "GROUP_ID": f"flinkai-demo-{run_id}",
        **(variables or {}),
    }
    started = time.monotonic()
    run_script(script, config, RunOptions(variables=variables, udf_dirs=udf_dirs))
    seconds = time.monotonic() - started
    # After a bounded job FINISHES its sinks have flushed; short timeouts suffice.
    embedded = [
        json.loads(r.value or b"null") for r in consume_all(bootstrap, topics[1], timeout_s=30)
    ]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, topics[2], timeout_s=30)]
    return DemoReport(len(events), embedded, dead, seconds, topics)


def print_report(report: DemoReport, show: int = 3) -> None:
    """Human-readable summary: a few embeddings, counts, dead letters by reason."""
    print(
        f"\nfirst {min(show, len(report.embedded))} of {len(report.embedded)} embeddings "
        f"on {report.topics[1]}:"
    )
    for row in report.embedded[:show]:
        vec = row["embedding_vec"]
        assert isinstance(vec, list)
        head = ", ".join(f"{v:+.4f}" for v in vec[:4])
        print(f"  user={row['user_id']} dim={len(vec)} [{head}, ...] model={row['model_version']}")
    reasons = collections.Counter(str(d["reason"]) for d in report.dead_letters)
    print(f"\ndead letters on {report.topics[2]}: {len(report.dead_letters)}")
    for reason, n in sorted(reasons.items()):
        sample = next(d for d in report.dead_letters if d["reason"] == reason)
        raw = base64.b64decode(str(sample["payload_base64"]))[:40]
        print(f"  {reason:<16} {n:>3}  offset={sample['source_offset']} payload={raw!r}")
    print(
        f"\nproduced {report.produced} | embedded {len(report.embedded)} | "
        f"dead-lettered {len(report.dead_letters)} | job {report.job_seconds:.1f} s"
    )
    if not report.accounted:
        raise FlinkAIError(
            f"{report.produced - len(report.embedded) - len(report.dead_letters)} event(s) unaccounted for"
        )
    print("every event is accounted for: embedded or dead-lettered")
