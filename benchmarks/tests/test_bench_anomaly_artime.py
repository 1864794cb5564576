"""The ARTime rows of the anomaly bench, and their leave-one-group-out over the margin."""

from __future__ import annotations

import numpy as np

from flinkai.anomaly.nab import LabelledSeries, NabSeries, Window, probationary_length
from flinkai_bench.anomaly import _artime_bench, run_detector
from flinkai_bench.anomaly_artime import (
    ArtimeBench,
    artime_config,
    artime_logo,
    format_artime_logo,
)
from flinkai_bench.research.anomaly.artime import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_CATEGORIES,
    ArtimeConfig,
    ArtimeDetector,
)

N = 1200


def _nab(name: str, at: int, seed: int) -> NabSeries:
    rng = np.random.default_rng(seed)
    values = 10 + 3 * np.sin(np.arange(N) / 5) + rng.normal(0.0, 0.2, N)
    values[at : at + 3] += 30.0  # a spike far above the probation's range
    times = np.arange(N).astype("datetime64[m]")
    return NabSeries(LabelledSeries(name, N, (Window(at - 5, at + 5),)), times, values)


def _data(groups: str = "ABC") -> dict[str, NabSeries]:
    return {f"{g}/{g.lower()}.csv": _nab(f"{g}/{g.lower()}.csv", 700 + 50 * i, i)
            for i, g in enumerate(groups)}  # fmt: skip


def _direct(config: ArtimeConfig, values: np.ndarray) -> list[float]:
    det = ArtimeDetector(config)
    return [det.update(v) for v in values.tolist()]


def test_rows_score_as_the_detector_with_round_trips() -> None:
    data = _data("AB")
    for name in ("artime", "artime_learnt"):
        run = run_detector(name, data, round_trip_every=7)
        for key, s in data.items():
            config = artime_config(name, s.values, ArtimeBench())
            assert run.scores[key].tolist() == _direct(config, s.values)
            assert run.categories[key] >= 2
        assert run.operator_ms and run.step_ms and run.state_bytes
    s = data["A/a.csv"]
    nab = artime_config("artime", s.values, ArtimeBench())
    assert (nab.value_min, nab.value_max) == (s.values.min(), s.values.max())
    assert nab.probation == probationary_length(N)
    assert nab.max_categories == DEFAULT_MAX_CATEGORIES
    learnt = artime_config("artime_learnt", s.values, ArtimeBench(probation=300, max_categories=0))
    assert (learnt.value_min, learnt.probation, learnt.margin) == (None, 300, DEFAULT_MARGIN)
    assert learnt.max_categories == 0


def test_margin_logo_picks_a_listed_margin_per_fold() -> None:
    logo = artime_logo(_data(), ArtimeBench(margins=[0.0, 1.0]), ["raw"])
    assert logo["margins"] == [0.0, 1.0] and logo["probations"] == ["nab"]
    folds = logo["scorers"]["raw"]["folds"]
    assert {f["held_out"] for f in folds} == {"A", "B", "C"}
    assert all(f["setting"]["margin"] in (0.0, 1.0) for f in folds)
    assert all(f["setting"]["probation"] == "nab" for f in folds)
    assert "ARTime with a learnt range" in format_artime_logo(logo)[0]
    joint = artime_logo(_data(), ArtimeBench(margins=[1.0], probations=[150, 300]), ["raw"])
    assert len(joint["scorers"]["raw"]["settings"]) == 2
    assert {f["setting"]["probation"] for f in joint["scorers"]["raw"]["folds"]} <= {150, 300}


def test_bad_artime_flags_are_refused() -> None:
    assert "expected numbers" in str(_artime_bench(1.0, "0,x", None, 200))
    assert "margin must be >= 0" in str(_artime_bench(-0.5, None, None, 200))
    assert "margin must be >= 0" in str(_artime_bench(1.0, "0,-1", None, 200))
    assert "probation must be >= 16" in str(_artime_bench(1.0, None, 10, 200))
    assert "max_categories" in str(_artime_bench(1.0, None, None, 1))
    assert _artime_bench(0.5, "0,1", 300, 0) == ArtimeBench(0.5, 300, [0.0, 1.0], 0)
    assert "give the margins" in str(_artime_bench(1.0, None, None, 200, "300"))
    assert "probation must be >= 16" in str(_artime_bench(1.0, "1", None, 200, "300,10"))
    assert _artime_bench(1.0, "1", None, 200, "300,750") == ArtimeBench(
        1.0, None, [1.0], 200, [300, 750]
    )
