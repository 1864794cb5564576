"""NAB scorer (flinkai_bench.research.anomaly.nab_score): published NAB v1.0 results
reproduced, rules checked on small series.

Published numbers come from ``benchmarks/tests/fixtures/nab_results`` (numenta/NAB, see its
README). Detections are rebuilt from the rows kept there; rows left out score below
every threshold used, so they are zeros here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from flinkai.anomaly import nab
from flinkai.anomaly.errors import NabDataError
from flinkai.anomaly.nab import LabelledSeries, Window
from flinkai.datasets import datasets_dir
from flinkai_bench.research.anomaly import nab_score
from flinkai_bench.research.anomaly.nab_score import PROFILES, CostProfile

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nab_results"
DETECTORS = ("numenta", "skyline", "bayesChangePt", "ARTime")
TOLERANCE = 0.5
STANDARD = PROFILES["standard"]
Items = list[tuple[LabelledSeries, np.ndarray]]


@cache
def _corpus() -> dict[str, LabelledSeries]:
    raw = json.loads((FIXTURES / "corpus_rows.json").read_text())
    return {
        name: LabelledSeries(name, v["rows"], tuple(Window(a, b) for a, b in v["windows"]))
        for name, v in raw.items()
    }


@cache
def _detections() -> pd.DataFrame:
    return pd.read_csv(FIXTURES / "detections.csv.gz")


@cache
def _dense_scores(detector: str) -> dict[str, np.ndarray]:
    """Per-file anomaly scores of a detector, zero where the fixture left rows out."""
    rows = _detections()
    by_file = dict(tuple(rows[rows["detector"] == detector].groupby("file")))
    out = {}
    for name, series in _corpus().items():
        scores = np.zeros(series.n_rows)
        if name in by_file:
            scores[by_file[name]["row"].to_numpy()] = by_file[name]["anomaly_score"].to_numpy()
        out[name] = scores
    return out


def _items(detector: str, names: Sequence[str] | None = None) -> Items:
    scores = _dense_scores(detector)
    corpus = _corpus()
    return [(corpus[n], scores[n]) for n in (names if names is not None else sorted(corpus))]


def _score_table(detector: str, profile: str) -> pd.DataFrame:
    # Only empty cells are missing: the detector name "null" is a name here.
    path = FIXTURES / "scores" / f"{detector}_{profile}_scores.csv"
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def _published(detector: str, profile: str) -> pd.DataFrame:
    """Per-file rows of a published score table, indexed by file."""
    table = _score_table(detector, profile)
    return table[table["Detector"] == detector].set_index("File")


def _published_total(detector: str, profile: str) -> float:
    """The ``Totals`` row of a published score table."""
    table = _score_table(detector, profile)
    return float(table.loc[table["Detector"] == "Totals", "Score"].iloc[0])


def _json(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


# --- published results ----------------------------------------------------------------


@cache
def _load_local(root: Path) -> dict[str, nab.NabSeries]:
    return nab.load_nab_folder(root)


#: The shared NAB subset beside the checkout (CI has it there).
SHARED_NAB = datasets_dir() / "nab"


@pytest.fixture
def local_series() -> dict[str, nab.NabSeries]:
    """The NAB subset in the shared datasets folder, read once; its absence fails, never skips."""
    return _load_local(nab.require_nab_folder(SHARED_NAB))


def test_loader_windows_match_fixture_rows(local_series: dict[str, nab.NabSeries]) -> None:
    corpus = _corpus()
    assert len(local_series) == 34
    for name, series in local_series.items():
        assert series.labels == corpus[name]
        assert len(series.values) == series.labels.n_rows


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("detector", DETECTORS)
def test_per_file_scores_on_local_files_match_published(
    local_series: dict[str, nab.NabSeries], detector: str, profile: str
) -> None:
    published = _published(detector, profile)
    names = sorted(local_series)
    scores = _dense_scores(detector)
    items = [(local_series[n].labels, scores[n]) for n in names]
    threshold = float(published["Threshold"].iloc[0])
    corpus = nab_score.score_corpus(items, threshold, PROFILES[profile])
    for f in corpus.files:
        row = published.loc[f.name]
        assert f.score == pytest.approx(row["Score"], abs=TOLERANCE), f.name
        # ARTime's table (scored by a later NAB) counts only the rows after the probation.
        total = f.total - (nab.probationary_length(f.total) if detector == "ARTime" else 0)
        assert (f.tp, f.tn, f.fp, f.fn, total) == tuple(
            int(row[c]) for c in ("TP", "TN", "FP", "FN", "Total_Count")
        ), f.name
    subset_total = published.loc[names, "Score"].sum()
    assert corpus.score == pytest.approx(subset_total, abs=TOLERANCE)


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("detector", DETECTORS)
def test_full_corpus_at_published_threshold_matches_published(detector: str, profile: str) -> None:
    published = _published(detector, profile)
    items = _items(detector)
    threshold = float(published["Threshold"].iloc[0])
    result = nab_score.evaluate(items, PROFILES[profile], threshold=threshold)
    scores = {f.name: f.score for f in result.files}
    diffs = [abs(scores[name] - s) for name, s in published["Score"].items()]
    assert len(diffs) == 58
    assert max(diffs) < 1e-6
    assert result.raw == pytest.approx(_published_total(detector, profile), abs=1e-6)
    if detector in _json("final_results.json"):
        final = _json("final_results.json")[detector][profile]
        assert result.normalized == pytest.approx(final, abs=TOLERANCE)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_null_detector_baseline_matches_published(profile: str) -> None:
    published = _published("null", profile)
    labels = list(_corpus().values())
    assert len(published) == 58
    assert nab_score.null_score(labels, PROFILES[profile]) == _published_total("null", profile)
    # NAB's null detector outputs 0.5 on every row; its tables use threshold 0.6.
    null_items = [(s, np.full(s.n_rows, 0.5)) for s in labels]
    files = nab_score.score_corpus(null_items, 0.6, PROFILES[profile]).files
    assert {f.name: f.score for f in files} == published["Score"].to_dict()
    assert nab_score.perfect_score(labels, PROFILES[profile]) == 116.0


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("detector", DETECTORS)
def test_optimised_threshold_reaches_published_score(detector: str, profile: str) -> None:
    items = _items(detector)
    published = float(_json("thresholds.json")[detector][profile]["score"])
    choice = nab_score.optimize_threshold(items, PROFILES[profile])
    # NAB v1.0's search was not exhaustive: an exhaustive sweep may only do better.
    assert choice.score >= published - 1e-6
    rescored = nab_score.score_corpus(items, choice.threshold, PROFILES[profile]).score
    assert rescored == pytest.approx(choice.score, abs=1e-9)
    if detector in _json("final_results.json"):
        result = nab_score.evaluate(items, PROFILES[profile], threshold=choice.threshold)
        final = _json("final_results.json")[detector][profile]
        assert result.normalized == pytest.approx(final, abs=TOLERANCE)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(CostProfile("standard", 1.0, 0.22, 1.0), id="fp-weight-of-low-FP-profile"),
        pytest.param(CostProfile("standard", 1.0, 0.11, 2.0), id="fn-weight-of-low-FN-profile"),
        pytest.param(CostProfile("standard", 1.0, 0.0, 1.0), id="free-false-positives"),
    ],
)
@pytest.mark.parametrize("detector", ["numenta", "skyline"])
def test_wrong_profile_weights_miss_published_scores(detector: str, variant: CostProfile) -> None:
    published = _published(detector, "standard")
    threshold = float(published["Threshold"].iloc[0])
    wrong = nab_score.score_corpus(_items(detector), threshold, variant).score
    right = nab_score.score_corpus(_items(detector), threshold, STANDARD).score
    assert abs(right - _published_total(detector, "standard")) < TOLERANCE
    assert abs(wrong - _published_total(detector, "standard")) > TOLERANCE


@pytest.mark.parametrize("detector", ["numenta", "skyline"])
def test_scoring_probationary_rows_misses_published_scores(detector: str) -> None:
    published = _published(detector, "standard")
    threshold = float(published["Threshold"].iloc[0])
    wrong = nab_score.score_corpus(_items(detector), threshold, STANDARD, probation_percent=0.0)
    assert abs(wrong.score - _published_total(detector, "standard")) > TOLERANCE


# --- rules on small series -------------------------------------------------------------


def _series(n: int, *windows: tuple[int, int]) -> LabelledSeries:
    return LabelledSeries("t/x.csv", n, tuple(Window(a, b) for a, b in windows))


def _hits(n: int, *rows: int) -> np.ndarray:
    scores = np.zeros(n)
    scores[list(rows)] = 1.0
    return scores


def _score(series: LabelledSeries, *rows: int, profile: CostProfile = STANDARD) -> float:
    return nab_score.score_file(series, _hits(series.n_rows, *rows), 0.5, profile, 0.0).score


def test_scaled_sigmoid_published_points() -> None:
    y = np.array([-1.0, -0.5, 0.0, 1.0, 3.0, 3.01, 1e6])
    expected = [0.98661, 0.84828, 0.0, -0.98661, -0.99999939, -1.0, -1.0]
    assert nab_score.scaled_sigmoid(y) == pytest.approx(expected, abs=1e-5)


def test_file_without_windows() -> None:
    series = _series(50)
    assert _score(series) == 0.0
    assert _score(series, 10, 20) == pytest.approx(-2 * 0.11)
    assert nab_score.null_score([series], STANDARD, 0.0) == 0.0
    with pytest.raises(NabDataError):
        nab_score.normalized_score(0.0, 0.0, nab_score.perfect_score([series], STANDARD))


def test_detection_at_window_edges() -> None:
    series = _series(100, (40, 49))
    assert _score(series) == -1.0
    assert _score(series, 40) == pytest.approx(1.0)
    right = float(nab_score.scaled_sigmoid(-1 / 10) / nab_score.scaled_sigmoid(-1.0))
    assert _score(series, 49) == pytest.approx(right)
    assert 0 < right < 0.3
    # One row either side is outside: before the window is a plain FP, after a cheap FP.
    assert _score(series, 39) == pytest.approx(-1.0 - 0.11)
    assert -1.0 - 0.11 < _score(series, 50) < -1.0 + 0.001


def test_several_detections_in_a_window_count_once_the_earliest() -> None:
    series = _series(100, (40, 49))
    assert _score(series, 43, 45, 48) == pytest.approx(_score(series, 43))
    assert _score(series, 43) > _score(series, 45) > _score(series, 48) > 0
    counts = nab_score.score_file(series, _hits(100, 43, 45, 48), 0.5, STANDARD, 0.0)
    assert (counts.tp, counts.fn, counts.fp, counts.tn) == (3, 7, 0, 90)


def test_false_positive_after_window_costs_less_than_far_from_it() -> None:
    series = _series(200, (40, 49))
    near, mid, far = _score(series, 52), _score(series, 70), _score(series, 150)
    base = -1.0  # the missed window
    assert far == pytest.approx(base - 0.11)
    assert far < mid < near < base
    # Past 3 window widths the sigmoid is clamped: a full A_FP.
    assert _score(series, 49 + 28) == pytest.approx(base - 0.11)


def test_profiles_weigh_misses_and_false_positives() -> None:
    series = _series(100, (40, 49), (70, 79))
    scores = {p: _score(series, 40, 10, profile=PROFILES[p]) for p in PROFILES}
    assert scores["standard"] == pytest.approx(1.0 - 1.0 - 0.11)
    assert scores["reward_low_FP_rate"] == pytest.approx(1.0 - 1.0 - 0.22)
    assert scores["reward_low_FN_rate"] == pytest.approx(1.0 - 2.0 - 0.11)


def test_probationary_rows_and_windows_are_ignored() -> None:
    series = _series(100, (2, 5), (40, 49))
    # 15 probationary rows: the first window cannot be scored or missed.
    assert nab_score.score_file(series, _hits(100, 3, 8), 0.5, STANDARD).score == -1.0
    assert nab_score.null_score([series], STANDARD) == -1.0
    assert nab_score.perfect_score([series], STANDARD) == 2.0


def test_optimize_threshold_sweeps_every_score() -> None:
    series = _series(100, (40, 49))
    scores = np.zeros(100)
    scores[[41, 60, 90]] = [0.8, 0.9, 0.3]
    choice = nab_score.optimize_threshold([(series, scores)], STANDARD, 0.0)
    assert choice.threshold == 0.8
    expected = nab_score.score_file(series, scores, 0.8, STANDARD, 0.0).score
    assert choice.score == pytest.approx(expected)
    # With only false positives available, never firing (1.1) is best.
    fp_only = nab_score.optimize_threshold(
        [(series, np.where(scores == 0.8, 0, scores))], STANDARD, 0.0
    )
    assert (fp_only.threshold, fp_only.score) == (1.1, -1.0)


def test_evaluate_normalises_between_null_and_perfect() -> None:
    series = _series(100, (40, 49), (70, 79))
    perfect = nab_score.evaluate([(series, _hits(100, 40, 70))], STANDARD, 0.0)
    null = nab_score.evaluate([(series, np.zeros(100))], STANDARD, 0.0)
    half = nab_score.evaluate([(series, _hits(100, 40))], STANDARD, 0.0)
    assert perfect.normalized == pytest.approx(100.0)
    assert null.normalized == pytest.approx(0.0)
    assert half.normalized == pytest.approx(50.0)


def test_event_metrics_definition() -> None:
    series = _series(100, (40, 49), (70, 79), (90, 95))
    # Window 1 hit twice (counts once), window 2 hit at its last row, window 3 missed,
    # and two detections outside every window.
    m = nab_score.event_metrics(series, _hits(100, 40, 45, 79, 50, 10), 0.5, 0.0)
    assert (m.tp, m.fn, m.fp) == (2, 1, 2)
    assert m.precision == pytest.approx(0.5)
    assert m.recall == pytest.approx(2 / 3)
    assert m.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    empty = nab_score.event_metrics(_series(10), np.zeros(10), 0.5, 0.0)
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)
    summed = nab_score.event_metrics_corpus(
        [(series, _hits(100, 40)), (series, _hits(100, 5))], 0.5, 0.0
    )
    assert (summed.tp, summed.fn, summed.fp) == (1, 5, 1)


def test_event_metrics_skip_probationary_rows() -> None:
    series = _series(100, (2, 5), (40, 49))
    m = nab_score.event_metrics(series, _hits(100, 3, 8, 41), 0.5)
    assert (m.tp, m.fn, m.fp) == (1, 0, 0)


def test_score_length_must_match_rows() -> None:
    with pytest.raises(NabDataError, match="3 anomaly scores for 4 rows"):
        nab_score.score_file(_series(4), [0.1, 0.2, 0.3], 0.5, STANDARD)


@pytest.mark.parametrize("windows", [((5, 3),), ((0, 10),), ((0, 4), (4, 6)), ((6, 7), (0, 2))])
def test_bad_windows_are_refused(windows: tuple[tuple[int, int], ...]) -> None:
    with pytest.raises(NabDataError):
        _series(10, *windows)
