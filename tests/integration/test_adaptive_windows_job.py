"""Adaptive windows on Flink: sizes follow the processing delay and shrink on a drift.

``jobs/drift_monitor.sql`` runs unbounded on the real broker and MiniCluster, with the
per-event ``cusum`` detector, while a paced producer sends one text stream in three
phases:

1. *late*: World+Sports events whose event time is 40 s behind the clock (a feed that
   arrives late), so each window measures a delay of at least 40 s;
2. *prompt*: the same topics stamped with the time they are sent;
3. *switch*: Sci/Tech, stamped with the time they are sent.

The window rule is ``clamp(base + delay / divisor, min, max)``. With the base at 2 s,
a 40 s delay asks for 6 s windows and a prompt feed for about 2 s. The switch raises
a drift, which cuts the open window short and makes the next one ``min_ms`` long. The
window lengths are read from the committed output; each window's length is checked
against the length its predecessor asked for.
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from flinkai import metrics
from flinkai.config import AdaptiveWindowConfig, load_config
from flinkai.functions.adaptive_window import adaptive_window_ms
from flinkai.kafka.admin import create_topics, produce, read_to_end_offsets
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port
from flinkai.models.artifacts import ModelArtifacts
from flinkai.runtime.runner import RunOptions, run_script

from .streaming import wait_until
from .test_drift_job import texts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WINDOW = AdaptiveWindowConfig(base_ms=2000, delay_divisor=10.0, min_ms=500, max_ms=20000)
LATE_MS = 40_000
RATE = 20.0  # events/s, well under what the model embeds here
WARM, LATE, PROMPT, SWITCH = 20, 260, 200, 120
#: A short reference and null sample so cusum monitors before the switch; the
#: defaults (100 + 400 events) would need a longer stream.
SETTINGS = {
    "flinkai.drift_detector": "cusum",
    "flinkai.cusum.reference_events": "60",
    "flinkai.cusum.null_events": "200",
    **{f"flinkai.adaptive_window.{k}": str(v) for k, v in vars(WINDOW).items()},
}


def _events(items: list[str], late_ms: int) -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        json.dumps({"stream_id": "news", "text": t, "event_time": now - late_ms}).encode()
        for t in items
    ]


def _paced(bootstrap: str, topic: str, phases: list[tuple[list[str], int]], marks: dict) -> None:
    """Send each phase at RATE in chunks of 5, stamping event times as they go out."""
    for index, (items, late_ms) in enumerate(phases):
        marks[index] = int(time.time() * 1000)
        for i in range(0, len(items), 5):
            produce(bootstrap, topic, _events(items[i : i + 5], late_ms))
            time.sleep(5 / RATE)


def _length(w: dict[str, Any]) -> int:
    return int(w["window_end_ms"] - w["window_start_ms"])


def _rows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    snap = read_to_end_offsets(bootstrap, topic, timeout_s=30)
    return [json.loads(r.value or b"null") for r in snap.records]


def test_windows_follow_the_delay_and_shrink_on_drift(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts
) -> None:
    base = load_config(env={})
    port = free_port()
    # Checkpoints every 2 s, not 5: the first window and the last wait for a commit.
    config = base.with_overrides(
        runtime={
            "flink_conf": {**base.runtime.flink_conf, **SETTINGS},
            "prometheus_port": port,
            "checkpoint_interval_ms": 2000,
        }
    )
    run_id = uuid.uuid4().hex[:8]
    source, drift, windows, dlq = (
        f"{p}-{run_id}" for p in ("aw-in", "aw-drift", "aw-win", "aw-dlq")
    )
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, drift, windows, dlq])
    before, after = texts(WARM + LATE + PROMPT, SWITCH)
    warm, late, prompt = before[:WARM], before[WARM : WARM + LATE], before[WARM + LATE :]
    total = WARM + LATE + PROMPT + SWITCH

    result = run_script(
        REPO / "jobs" / "drift_monitor.sql",
        config,
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "TEXT_TOPIC": source,
                "DRIFT_TOPIC": drift,
                "DLQ_TOPIC": dlq,
                "WINDOW_TOPIC": windows,
                "SCAN_BOUNDED_MODE": "unbounded",
                "GROUP_ID": f"aw-{run_id}",
            },
            wait=False,
        ),
    )
    marks: dict[int, int] = {}
    try:
        # Running: the warm-up events come out in a committed window.
        produce(bootstrap, source, _events(warm, LATE_MS))
        assert wait_until(lambda: bool(_rows(bootstrap, windows)), 240, interval_s=2.0), (
            "no window committed for the warm-up events"
        )
        producer = threading.Thread(
            target=_paced,
            args=(bootstrap, source, [(late, LATE_MS), (prompt, 0), (after, 0)], marks),
            daemon=True,
        )
        producer.start()
        producer.join(timeout=120)
        assert not producer.is_alive(), "the producer did not finish in 120 s"
        # Every event lands in a closed window: the last one closes on its timer.
        closed: list[dict[str, Any]] = []

        def all_in() -> bool:
            nonlocal closed
            closed = _rows(bootstrap, windows)
            return sum(w["n"] for w in closed) >= total

        assert wait_until(all_in, 120, interval_s=2.0), closed
        drifts = _rows(bootstrap, drift)
        dead = _rows(bootstrap, dlq)
        # The per-key drift metrics, as Flink's Prometheus reporter exports them.
        scraped = metrics.scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        if result.job_client is not None:
            result.job_client.cancel().result()

    t0 = closed[0]["window_start_ms"]
    print("windows (start s, length ms, n, delay ms, next ms, closed by):")
    for w in closed:
        row = (w["window_start_ms"] - t0) / 1000, _length(w), w["n"], round(w["delay_ms"])
        print(*row, w["next_window_ms"], w["closed_by"])
    print("phases start (s):", {k: (v - t0) / 1000 for k, v in marks.items()}, "drifts:", drifts)
    # Exactly one window per event, nothing dead-lettered.
    assert sum(w["n"] for w in closed) == total, closed
    assert not dead, dead

    # The drift: raised by the switch, not before it.
    switch_ms = marks[2]
    assert drifts, f"the switch raised no drift; windows: {closed}"
    assert all(d["period_end_ms"] >= switch_ms for d in drifts), (switch_ms, drifts)

    # Each operator keeps its own per-key series (label key="news"): every drift was
    # counted, and the score gauge and the window length gauge are exported.
    detected = scraped.get(metrics.prometheus_name(metrics.DRIFT_DETECTED), [])
    score = scraped.get(metrics.prometheus_name(metrics.DRIFT_SCORE), [])
    assert detected and all(labels.get("key") == "news" for labels, _ in detected), detected
    assert max(v for _, v in detected) == len(drifts), (detected, drifts)
    assert score and all(labels.get("key") == "news" for labels, _ in score), score
    length_gauge = scraped.get(metrics.prometheus_name(metrics.WINDOW_LENGTH_MS), [])
    assert length_gauge and length_gauge[0][1] > 0, length_gauge

    # Each window asked for the length the rule gives for its measured delay ...
    for w in closed:
        if w["closed_by"] == "timer":
            assert w["next_window_ms"] == adaptive_window_ms(w["delay_ms"], WINDOW), w
    # ... and the window after it had that length (a timer-closed one opens at its
    # predecessor's end and closes on its own timer).
    followed = 0
    for prev, w in itertools.pairwise(closed):
        chained = prev["closed_by"] in ("timer", "drift") and w["closed_by"] == "timer"
        if chained and w["window_start_ms"] == prev["window_end_ms"]:
            assert _length(w) == prev["next_window_ms"], (prev, w)
            followed += 1
    assert followed >= 5, closed

    # Sizes follow the delay: late windows (all events >= 40 s behind) are about 4 s
    # longer than prompt ones.
    late_sizes = [w["next_window_ms"] for w in closed if w["delay_ms"] >= LATE_MS]
    prompt_sizes = [
        w["next_window_ms"]
        for w in closed
        if w["delay_ms"] < LATE_MS / 4 and w["closed_by"] == "timer"
    ]
    assert len(late_sizes) >= 3 and len(prompt_sizes) >= 3, closed
    assert min(late_sizes) >= WINDOW.base_ms + LATE_MS / WINDOW.delay_divisor, late_sizes
    assert statistics.median(prompt_sizes) <= statistics.median(late_sizes) - 2000, (
        prompt_sizes,
        late_sizes,
    )

    # The drift shrank the windows: the first window after the switch that is min_ms
    # long opens where its predecessor ended. That predecessor was cut short by the
    # drift (closed_by "drift", asking for min_ms), unless the drift came on the first
    # event of a window a timer had just opened: an empty window is dropped, not emitted.
    assert not [w for w in closed if w["window_end_ms"] < switch_ms and _length(w) == WINDOW.min_ms]
    short = [
        i
        for i, w in enumerate(closed)
        if i > 0 and w["window_start_ms"] >= switch_ms and _length(w) == WINDOW.min_ms
    ]
    assert short, closed
    shrunk, cut = closed[short[0]], closed[short[0] - 1]
    assert shrunk["window_start_ms"] - switch_ms < 15_000, (switch_ms, shrunk)
    if cut["closed_by"] == "drift":
        assert cut["next_window_ms"] == WINDOW.min_ms, cut
        assert cut["window_end_ms"] == shrunk["window_start_ms"], (cut, shrunk)
        assert _length(cut) < cut_asked(closed, short[0] - 1), (cut, closed)
    else:
        assert cut["closed_by"] == "timer" and cut["window_end_ms"] <= shrunk["window_start_ms"]
    assert [w["closed_by"] for w in closed].count("drift") <= 1, closed


def cut_asked(closed: list[dict[str, Any]], index: int) -> int:
    """The length the window at ``index`` was opened with (its predecessor's ask)."""
    return int(closed[index - 1]["next_window_ms"])
