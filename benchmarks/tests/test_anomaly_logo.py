"""Leave-one-group-out selection (flinkai_bench.research.anomaly.logo) and the scorer options."""

from __future__ import annotations

import numpy as np
import pytest

from flinkai.anomaly.errors import NabDataError
from flinkai.anomaly.features import ErrorScorer, ScorerConfig
from flinkai.anomaly.nab import LabelledSeries, Window
from flinkai_bench.research.anomaly.logo import logo_select
from flinkai_bench.research.anomaly.scorers import (
    SCORERS,
    SETTINGS,
    apply_scorer,
    bounded,
    peak_gated,
)

N = 200  # probation: the first 30 rows


def _series(name: str, starts: list[int]) -> LabelledSeries:
    return LabelledSeries(name, N, tuple(Window(s, s + 9) for s in starts))


# Group A: two files of one window each; B and C: one file of one window each.
LABELS = [
    _series("A/a1.csv", [100]),
    _series("A/a2.csv", [120]),
    _series("B/b1.csv", [100]),
    _series("C/c1.csv", [150]),
]


def _fires_at_windows(groups: set[str]) -> list[np.ndarray]:
    """1.0 at the left edge of every window of files in ``groups``, 0 elsewhere."""
    out = []
    for s in LABELS:
        a = np.zeros(N)
        if s.name.split("/")[0] in groups:
            for w in s.windows:
                a[w.start] = 1.0
        out.append(a)
    return out


def test_a_group_never_chooses_its_own_setting() -> None:
    # c0 is perfect on B and C only, c1 on A only. Each fold picks what wins on the
    # *other* groups, which is always the candidate that is blind on the held-out one.
    result = logo_select(LABELS, [_fires_at_windows({"B", "C"}), _fires_at_windows({"A"})])
    assert [(f["held_out"], f["candidate"]) for f in result["folds"]] == [
        ("A", 0),  # trained on B, C: c0 scores +2, c1 -2
        ("B", 1),  # trained on A, C: c0 -2 + 1, c1 +2 - 1
        ("C", 1),
    ]
    # So every held-out window is missed: the null score, 0, both ways...
    assert result["pooled"]["standard"] == pytest.approx(0.0)
    assert result["strict_standard"] == pytest.approx(0.0)
    # ...where choosing on all files at once (the leaky protocol) reports 50.
    assert result["in_sample_best_standard"] == pytest.approx(50.0)


def test_a_setting_good_everywhere_is_chosen_by_every_fold() -> None:
    rng = np.random.default_rng(0)
    noise = [rng.random(N) for _ in LABELS]
    result = logo_select(LABELS, [noise, _fires_at_windows({"A", "B", "C"})])
    assert {f["candidate"] for f in result["folds"]} == {1}
    assert result["pooled"]["standard"] == pytest.approx(100.0)
    assert result["strict_standard"] == pytest.approx(100.0)


def test_one_group_is_refused() -> None:
    with pytest.raises(NabDataError, match="two groups"):
        logo_select(LABELS[:2], [_fires_at_windows({"A"})[:2]])


def test_scorer_options() -> None:
    native = np.array([np.nan, 1.0, 3.0, 0.5, 3.0, 9.0])
    values = np.arange(6, dtype=np.float64)
    assert bounded(native).tolist() == pytest.approx([0.0, 0.5, 0.75, 1 / 3, 0.75, 0.9])
    # The gate keeps a score only above every score of the window before it.
    assert peak_gated(bounded(native), 2).tolist() == pytest.approx([0, 0.5, 0.75, 0, 0, 0.9])
    assert apply_scorer("raw", native, values).tolist() == bounded(native).tolist()
    # "likelihood" is the operator's ErrorScorer over the native score, NaN skipped.
    cfg = ScorerConfig(warmup=1, peak_window=0)
    scorer = ErrorScorer(cfg)
    expected = [0.0] + [scorer.score(e) for e in native[1:]]
    got = apply_scorer("likelihood", native, values, {"warmup": 1, "peak_window": 0})
    assert got.tolist() == pytest.approx(expected)
    # "numenta" on a 6-point file (no probation): the first fit has no history, so the
    # null distribution (about 0.03); from the third value on each is outside the range.
    out = apply_scorer("numenta", native, values).tolist()
    assert out[:2] == pytest.approx([0.0301, 0.0301], abs=1e-3)
    assert out[2:] == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="unknown scorer"):
        apply_scorer("nope", native, values)
    assert set(SETTINGS) == set(SCORERS)


def test_bench_operator_scorer_option() -> None:
    from flinkai.errors import ConfigError
    from flinkai_bench.anomaly import _operator_scorer

    assert _operator_scorer(None) is None
    cfg = _operator_scorer("likelihood=numenta, peak_window=0,numenta_history=3500")
    assert cfg == ScorerConfig(likelihood="numenta", peak_window=0, numenta_history=3500)
    with pytest.raises(ConfigError, match="not one of"):
        _operator_scorer("likelihood=htm")
    with pytest.raises(ConfigError, match="expected field=value"):
        _operator_scorer("nope=1")
