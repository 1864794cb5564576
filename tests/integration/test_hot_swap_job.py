"""Hot swap under load, inside a running Flink job, on the real broker and model.

The unbounded embed job serves the registry's CURRENT version while events stream
in at a steady rate; five new versions are published mid-stream, each with about 53
events (3.5 s) of its own, as each of the ten had before (ten took about 84 s; five
check the same order and exactly-once properties on every swap). The committed
output must hold every input event exactly once, none on the DLQ, and the model
version per key (and, with one subtask, along the whole output) must only move
forward: a batch computed by a mix of versions, or a row stamped with the wrong
one, would break that order.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.kafka.admin import produce
from flinkai.kafka.broker import LocalKafka
from flinkai.models.artifacts import ModelArtifacts
from flinkai.models.registry import ModelRegistry

from .streaming import StreamingJob

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 340
WARM = 20
KEYS = 8
SWAPS = 5
RATE = 15.0  # events/s: a steady load well below the job's capacity
START_MS = 1764576000000


def event(i: int) -> bytes:
    return json.dumps(
        {
            "user_id": f"u{i % KEYS}",
            "click_text": f"click {i} on item {i % 13} in category {i % 5}",
            "event_time": START_MS + i,  # unique: identifies the event in the output
        }
    ).encode()


def epoch_ms(iso: str) -> int:
    """The sink writes event_time as ISO-8601 UTC with milliseconds."""
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def publish(registry: ModelRegistry, model: Path, n: int) -> str:
    """Version ``vNN``: the same model plus a marker file, so the content differs."""
    files: dict[str, Path | bytes] = {
        str(p.relative_to(model)): p for p in sorted(model.rglob("*")) if p.is_file()
    }
    files["swap-marker.txt"] = f"{n}\n".encode()
    return registry.publish("minilm", files, version=f"v{n:02d}").model_version


def test_hot_swaps_under_steady_load(
    kafka_broker: LocalKafka, model_artifacts: ModelArtifacts, tmp_path: Path
) -> None:
    root = tmp_path / "registry"
    registry = ModelRegistry(root)
    publish(registry, model_artifacts.root, 0)
    base = load_config(env={})
    config = base.with_overrides(
        registry={"enabled": True, "root": str(root), "name": "minilm", "poll_interval_s": 0.5},
        # The model's own name stays all-MiniLM-L6-v2: its artifact manifest must match.
        # Checkpoints every 2 s, not 5: the warm-up and the last events wait for a commit.
        runtime={"checkpoint_interval_ms": 2000},
    )
    events = [event(i) for i in range(N)]
    job = StreamingJob(kafka_broker.bootstrap, config=config)
    job.start()
    published: list[str] = []
    try:
        job.warm_up(events, WARM)
        # One thread produces at a steady rate and publishes a new version at the
        # start of each of SWAPS segments, so every version has a segment of events
        # produced after it, on any machine speed; the last segment runs on the newest.
        stream = events[WARM:]
        segment = len(stream) // (SWAPS + 1)
        chunk = 3
        t0 = time.monotonic()
        for start in range(0, len(stream), chunk):
            n = start // segment
            if start % segment < chunk and 1 <= n <= SWAPS and len(published) < n:
                published.append(publish(registry, model_artifacts.root, n))
            produce(kafka_broker.bootstrap, job.topics[0], stream[start : start + chunk])
            # On the clock: the sends' own time (about 0.12 s) stretched each segment
            # from 3.5 s to nearly 6.
            time.sleep(max(0.0, t0 + (start + chunk) / RATE - time.monotonic()))
        done = job.wait_for(lambda c: c >= N, timeout_s=240)
        out, dlq = job.outputs(expect=N)
    finally:
        job.cancel()

    assert len(published) == SWAPS
    assert done >= N
    assert not dlq, [json.loads(r.value or b"null") for r in dlq[:5]]
    rows = [json.loads(r.value or b"null") for r in sorted(out, key=lambda r: r.offset)]
    seen = Counter(epoch_ms(r["event_time"]) for r in rows)
    assert len(rows) == N and set(seen) == {START_MS + i for i in range(N)}, (
        f"{len(rows)} rows, {N - len(seen)} events missing, "
        f"{sum(c > 1 for c in seen.values())} duplicated"
    )

    def number(row: dict[str, object]) -> int:
        match = re.fullmatch(r"minilm@v(\d\d)", str(row["model_version"]))
        assert match, row["model_version"]
        return int(match.group(1))

    versions = [number(r) for r in rows]
    backwards = [(a, b) for a, b in itertools.pairwise(versions) if b < a]
    assert not backwards, f"the version moved backwards {len(backwards)} times: {backwards[:5]}"
    for key in {r["user_id"] for r in rows}:
        per_key = [v for r, v in zip(rows, versions, strict=True) if r["user_id"] == key]
        assert per_key == sorted(per_key), key
    # Every swap reached the job before the stream ended (the last ones serve rows).
    counts = Counter(versions)
    assert versions[0] == 0 and versions[-1] == SWAPS, counts
    assert len(counts) >= SWAPS - 1, f"versions that served rows: {sorted(counts.items())}"
    assert all(len(r["embedding_vec"]) == 384 for r in rows)
