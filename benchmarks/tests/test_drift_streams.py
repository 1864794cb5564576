"""Topic-shift streams (determinism, ground truth) and how the drift bench scores them.

Uses a synthetic labelled corpus: no model, no shared data sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends.base import EmbeddingBackend
from flinkai.config import Config
from flinkai_bench import drift as bench
from flinkai_bench.research.drift.streams import StreamSpec, build_stream, build_streams

# 4 classes x 25 rows, interleaved like a shuffled corpus.
LABELS = np.tile(np.arange(1, 5), 25)


def test_same_seed_same_stream() -> None:
    spec = StreamSpec(shift="gradual", seed=42)
    a, b = build_stream(LABELS, spec), build_stream(LABELS, spec)
    for field in ("event_time_s", "doc_index", "labels", "from_after"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert (a.change_start_s, a.change_end_s) == (b.change_start_s, b.change_end_s)


def test_different_seeds_differ() -> None:
    a = build_stream(LABELS, StreamSpec(shift="abrupt", seed=1))
    b = build_stream(LABELS, StreamSpec(shift="abrupt", seed=2))
    assert a.change_start_s != b.change_start_s
    assert len(a) != len(b) or not np.array_equal(a.event_time_s, b.event_time_s)


def test_abrupt_ground_truth() -> None:
    s = build_stream(LABELS, StreamSpec(shift="abrupt", seed=3))
    assert s.change_start_s is not None and s.change_start_s == s.change_end_s
    assert 600.0 <= s.change_start_s <= 1200.0
    after = s.event_time_s >= s.change_start_s
    np.testing.assert_array_equal(s.from_after, after)
    assert set(s.labels[~after].tolist()) == {1, 2}  # World + Sports
    assert set(s.labels[after].tolist()) == {4}  # Sci/Tech
    np.testing.assert_array_equal(LABELS[s.doc_index], s.labels)
    assert s.name == "abrupt/seed3"


def test_gradual_ground_truth_ramps_linearly() -> None:
    spec = StreamSpec(shift="gradual", seed=4, ramp_s=300.0)
    s = build_stream(LABELS, spec)
    assert s.change_start_s is not None and s.change_end_s is not None
    assert s.change_end_s == pytest.approx(s.change_start_s + 300.0)
    t = s.event_time_s
    assert not s.from_after[t < s.change_start_s].any()
    assert s.from_after[t >= s.change_end_s].all()
    ramp = (t >= s.change_start_s) & (t < s.change_end_s)
    first, second = np.array_split(s.from_after[ramp], 2)
    assert 0.05 < first.mean() < second.mean() < 0.95  # ~0.25 then ~0.75


def test_no_shift_control() -> None:
    s = build_stream(LABELS, StreamSpec(shift="none", seed=5))
    assert s.change_start_s is None and s.change_end_s is None
    assert not s.from_after.any()
    assert set(s.labels.tolist()) == {1, 2}


def test_arrivals_cover_the_duration_at_one_to_three_per_second() -> None:
    s = build_stream(LABELS, StreamSpec(shift="none", seed=6))
    t = s.event_time_s
    assert np.all(np.diff(t) >= 0)
    assert t[0] >= 0.0 and t[-1] < 1800.0
    assert 1.0 < len(t) / 1800.0 < 3.0
    per_minute = np.bincount((t // 60).astype(int), minlength=30)
    assert per_minute.min() >= 30 and per_minute.max() <= 240  # the rate swings


def test_sampling_with_replacement_from_a_small_corpus() -> None:
    tiny = np.array([1, 2, 4])  # one article per class
    s = build_stream(tiny, StreamSpec(shift="abrupt", seed=7))
    assert len(s) > 1000
    assert set(s.doc_index.tolist()) == {0, 1, 2}


def test_build_streams_shares_arrivals_across_shift_types() -> None:
    streams = build_streams(LABELS, seeds=[8, 9])
    assert [s.name for s in streams] == [
        "abrupt/seed8",
        "abrupt/seed9",
        "gradual/seed8",
        "gradual/seed9",
        "none/seed8",
        "none/seed9",
    ]
    # A paired design: one seed, one arrival process and change offset, three shift types.
    np.testing.assert_array_equal(streams[0].event_time_s, streams[4].event_time_s)
    assert streams[0].change_start_s == streams[2].change_start_s


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shift": "sideways"},
        {"shift": "abrupt", "rate_min_per_s": 0.0},
        {"shift": "abrupt", "rate_min_per_s": 3.0, "rate_max_per_s": 1.0},
        {"shift": "gradual", "change_range_s": (600.0, 1600.0)},  # ramp ends after 30 min
        {"shift": "abrupt", "change_range_s": (900.0, 600.0)},
        {"shift": "gradual", "ramp_s": 0.0},
    ],
)
def test_invalid_specs(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        StreamSpec(**kwargs)  # type: ignore[arg-type]


def test_missing_class_in_corpus() -> None:
    with pytest.raises(ValueError, match="class 4"):
        build_stream(np.array([1, 2, 3]), StreamSpec(shift="abrupt"))


def test_custom_mixes() -> None:
    spec = StreamSpec(shift="abrupt", seed=10, before=((3, 1.0),), after=((1, 0.5), (4, 0.5)))
    s = build_stream(LABELS, replace(spec, duration_s=1500.0))
    assert set(s.labels[~s.from_after].tolist()) == {3}
    assert set(s.labels[s.from_after].tolist()) == {1, 4}


# -- scoring against the ground truth ---------------------------------------------------


@pytest.mark.parametrize(
    ("detections", "start", "end", "expected"),
    [
        ([], 100.0, 100.0, (None, 0)),
        ([130.0], 100.0, 100.0, (130.0, 0)),
        ([220.0], 100.0, 100.0, (220.0, 0)),  # exactly at the tolerance
        ([221.0], 100.0, 100.0, (None, 1)),  # too late
        ([50.0, 130.0], 100.0, 100.0, (130.0, 1)),  # early alarm is false
        ([130.0, 150.0], 100.0, 100.0, (130.0, 1)),  # second alarm is false
        ([450.0], 100.0, 400.0, (450.0, 0)),  # gradual: window runs to end + tolerance
        ([10.0, 20.0], None, None, (None, 2)),  # no-shift control
    ],
)
def test_score_stream(
    detections: list[float],
    start: float | None,
    end: float | None,
    expected: tuple[float | None, int],
) -> None:
    assert bench.score_stream(detections, start, end, tolerance_s=120.0) == expected


def _score(shift: str, seed: int, hit: float | None, fa: int) -> bench.StreamScore:
    start = None if shift == "none" else 100.0
    return bench.StreamScore(
        detector="d",
        shift=shift,  # type: ignore[arg-type]
        seed=seed,
        change_start_s=start,
        change_end_s=start,
        detections_s=(),
        hit_s=hit,
        delay_ms=None if hit is None else (hit - 100.0) * 1000,
        false_alarms=fa,
    )


def test_summarize_precision_recall_f1_delay() -> None:
    scores = [
        _score("abrupt", 0, 110.0, 0),
        _score("abrupt", 1, 130.0, 1),
        _score("abrupt", 2, None, 0),
        _score("none", 0, None, 2),
    ]
    groups = {g.shift: g for g in bench.summarize(scores, ["d"])}
    abrupt, control, overall = groups["abrupt"], groups["none"], groups["all"]
    assert (abrupt.true_positives, abrupt.false_alarms, abrupt.changes) == (2, 1, 3)
    assert abrupt.precision == pytest.approx(2 / 3)
    assert abrupt.recall == pytest.approx(2 / 3)
    assert abrupt.f1 == pytest.approx(2 / 3)
    assert abrupt.median_delay_ms == pytest.approx(20_000)
    assert control.recall is None and control.f1 is None and control.false_alarms == 2
    assert overall.precision == pytest.approx(2 / 5)  # control alarms count against it


def test_format_table_shows_tolerance() -> None:
    result = bench.DriftBenchResult(setup={"seeds": [0], "tolerance_s": 90.0})
    result.groups = bench.summarize([_score("abrupt", 0, 110.0, 0)], ["d"])
    text = bench.format_table(result)
    assert "change end + 90 s" in text
    assert "10,000" in text


class _FakeBackend(EmbeddingBackend):
    name = "fake"
    dim = 4

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def load(self) -> None:
        pass

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in batch], dtype=np.float32)


def test_embeddings_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backends: list[_FakeBackend] = []

    def make(choice: str, cfg: Config) -> _FakeBackend:
        backends.append(_FakeBackend())
        return backends[-1]

    monkeypatch.setattr(bench, "_make_backend", make)
    texts = ["a", "bb", "ccc"]
    first, meta = bench.cached_embeddings(texts, Config(), cache_dir=tmp_path, batch=2)
    assert first.shape == (3, 4) and meta["backend"] == "fake"
    assert backends[0].calls == 2
    again, _ = bench.cached_embeddings(texts, Config(), cache_dir=tmp_path)
    np.testing.assert_array_equal(first, again)
    assert len(backends) == 1  # served from the cache
    bench.cached_embeddings([*texts, "d"], Config(), cache_dir=tmp_path)
    assert len(backends) == 2  # other texts, other key
