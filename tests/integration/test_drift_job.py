"""drift_monitor.sql on real parts: Kafka -> MiniCluster -> ONNX model -> drift operator -> Kafka.

A single text stream switches topic at a known event time; the job must report a
drift after the switch and none before it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from flinkai.config import AdaptiveWindowConfig, Config, load_config
from flinkai.datasets import DatasetNotFoundError, load_ag_news
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.models.artifacts import ModelArtifacts
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_MS = 1764576000000  # a multiple of the period: periods align with the stream
STEP_MS = 125  # 8 events/s: 40 events per 5 s period
BEFORE, AFTER = 360, 200  # 45 s of World+Sports, then 25 s of Sci/Tech
SWITCH_MS = START_MS + BEFORE * STEP_MS
PERIOD_S = 5
#: Short periods and a short warm-up so the test is brief; the early checks are off
#: so an alarm can only come from a whole period, which keeps the timing exact.
DRIFT_SETTINGS = {
    "flinkai.drift.period_s": str(PERIOD_S),
    "flinkai.drift.history": "3",
    "flinkai.drift.reference_periods": "2",
    "flinkai.drift.baseline": "false",
    "flinkai.drift.checks_per_period": "1",
}

_SPORTS = ["team", "match", "goal", "coach", "season", "league", "striker", "cup"]
_TECH = ["software", "chip", "processor", "database", "compiler", "network", "server", "quantum"]


def texts(n_before: int = BEFORE, n_after: int = AFTER) -> tuple[list[str], list[str]]:
    """(before, after): AG News World+Sports then Sci/Tech, else two synthetic vocabularies."""
    try:
        rows = load_ag_news()
    except DatasetNotFoundError:
        before = [
            f"The {_SPORTS[i % 8]} won the {_SPORTS[(i * 3) % 8]} again" for i in range(n_before)
        ]
        after = [f"A new {_TECH[i % 8]} speeds up the {_TECH[(i * 5) % 8]}" for i in range(n_after)]
        return before, after
    before = [t for label, t in rows if label in (1, 2)][:n_before]
    after = [t for label, t in rows if label == 4][:n_after]
    return before, after


def events() -> list[bytes]:
    before, after = texts()
    return [
        json.dumps({"stream_id": "news", "text": t, "event_time": START_MS + i * STEP_MS}).encode()
        for i, t in enumerate(before + after)
    ]


def test_drift_after_the_topic_switch(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts
) -> None:
    base = load_config(env={})
    config: Config = base.with_overrides(
        runtime={"flink_conf": {**base.runtime.flink_conf, **DRIFT_SETTINGS}}
    )
    run_id = uuid.uuid4().hex[:8]
    source, drift, dlq = f"texts-{run_id}", f"drift-{run_id}", f"drift-dlq-{run_id}"
    windows = f"windows-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, drift, dlq, windows])
    produce(bootstrap, source, [*events(), b"not json"])

    run_script(
        REPO / "jobs" / "drift_monitor.sql",
        config,
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "TEXT_TOPIC": source,
                "DRIFT_TOPIC": drift,
                "DLQ_TOPIC": dlq,
                "WINDOW_TOPIC": windows,
                "SCAN_BOUNDED_MODE": "latest-offset",
                "GROUP_ID": f"drift-{run_id}",
            },
            timeout_s=170,
        ),
    )

    found = [json.loads(r.value or b"null") for r in consume_all(bootstrap, drift, timeout_s=30)]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, dlq, timeout_s=30)]
    closed = [json.loads(r.value or b"null") for r in consume_all(bootstrap, windows, timeout_s=30)]
    assert [d["reason"] for d in dead] == ["not_json"]
    assert found, "the topic switch must raise a drift event"
    assert all(e["stream_id"] == "news" for e in found)
    early = [e for e in found if e["period_end_ms"] <= SWITCH_MS]
    assert not early, f"drift reported before the switch at {SWITCH_MS}: {early}"
    first = min(e["period_end_ms"] for e in found)
    # The period holding the switch, or the next one.
    assert first <= SWITCH_MS + 2 * PERIOD_S * 1000, (first - SWITCH_MS, found)
    assert all(e["n"] >= 10 and e["jsd"] > 0 for e in found)

    # Adaptive windows: every embedded event is in exactly one window, the drift cut
    # the open window short, and the end of the bounded input flushed the last one.
    assert sum(w["n"] for w in closed) == BEFORE + AFTER, closed
    reasons = [w["closed_by"] for w in closed]
    assert "drift" in reasons and reasons[-1] == "end_of_input", reasons
    cut = closed[reasons.index("drift")]
    assert cut["next_window_ms"] == AdaptiveWindowConfig().min_ms, cut
    # The events are months old: the delay rule asks for the longest window.
    assert all(w["delay_ms"] > 0 for w in closed)
    assert closed[0]["next_window_ms"] in (AdaptiveWindowConfig().max_ms, cut["next_window_ms"])
