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
from flinkai.functions.events import ClickEvent, parse_click
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.runtime.guarantees import for_bounded_scan
from flinkai.runtime.runner import RunOptions, run_script

__all__ = ["DemoReport", "accounting_problems", "poison_events", "run_demo", "sample_events"]


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

    events: list[bytes]
    embedded: list[dict[str, object]]
    dead_letters: list[dict[str, object]]
    job_seconds: float
    topics: tuple[str, str, str]
    max_text_bytes: int

    @property
    def produced(self) -> int:
        return len(self.events)

    @property
    def problems(self) -> list[str]:
        """Events not accounted for exactly once; see :func:`accounting_problems`."""
        return accounting_problems(
            self.events, self.embedded, self.dead_letters, self.max_text_bytes
        )

    @property
    def accounted(self) -> bool:
        return not self.problems


def accounting_problems(
    events: list[bytes],
    embedded: list[dict[str, object]],
    dead_letters: list[dict[str, object]],
    max_text_bytes: int,
) -> list[str]:
    """Check that each produced event came out exactly once, embedded or dead-lettered.

    Dead letters name their input by ``source_offset``. An embedding names it by
    ``(user_id, event_time)``, which it shares with its valid input; it accounts for
    one input with that key that was not dead-lettered. Equal totals are not enough:
    a duplicate would hide a loss.

    Returns:
        One line per problem (a lost, duplicated or unknown record); empty when exact.
    """
    problems: list[str] = []
    accounts: collections.Counter[int] = collections.Counter()
    for dead in dead_letters:
        offset = dead.get("source_offset")
        if not isinstance(offset, int) or not 0 <= offset < len(events):
            problems.append(f"dead letter with unknown source_offset {offset!r}")
        else:
            accounts[offset] += 1
    by_key: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for offset, payload in enumerate(events):
        event = parse_click(payload, max_text_bytes)
        if isinstance(event, ClickEvent) and not accounts[offset]:
            by_key[(event.user_id, event.event_time)].append(offset)
    for row in embedded:
        key = (str(row.get("user_id")), str(row.get("event_time")))
        if by_key.get(key):
            accounts[by_key[key].pop(0)] += 1
        else:
            problems.append(f"embedding of user_id={key[0]} event_time={key[1]} matches no input")
    for offset in range(len(events)):
        if accounts[offset] != 1:
            what = "lost" if accounts[offset] == 0 else f"output {accounts[offset]} times"
            problems.append(f"event at offset {offset} {what}")
    return problems


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
    config = for_bounded_scan(config)  # a failure ends the demo with its reason, not a hang
    started = time.monotonic()
    run_script(script, config, RunOptions(variables=variables, udf_dirs=udf_dirs))
    seconds = time.monotonic() - started
    # After a bounded job FINISHES its sinks have flushed; short timeouts suffice.
    embedded = [
        json.loads(r.value or b"null") for r in consume_all(bootstrap, topics[1], timeout_s=30)
    ]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, topics[2], timeout_s=30)]
    return DemoReport(events, embedded, dead, seconds, topics, config.embedding.max_text_bytes)


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
    problems = report.problems
    if problems:
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise FlinkAIError(
            f"{len(problems)} event(s) not accounted for exactly once:\n  {shown}{more}"
        )
    print("every event is accounted for: embedded or dead-lettered")
