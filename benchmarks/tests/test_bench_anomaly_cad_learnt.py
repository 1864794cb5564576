"""The learnt-range CAD in the anomaly bench: its operator row and its joint LOGO."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from flinkai.anomaly.cad import rest_masked
from flinkai.anomaly.cad_growing import GrowingRangeCad, GrowingRangeConfig
from flinkai.anomaly.contextual import LEARNT_REST_PERIOD
from flinkai.anomaly.nab import LabelledSeries, NabSeries, Window
from flinkai_bench.anomaly import _learnt_grid, run_anomaly_bench, run_detector
from flinkai_bench.anomaly_cad_learnt import learnt_logo, learnt_raw

N = 400


def _nab(name: str, at: int, seed: int) -> NabSeries:
    rng = np.random.default_rng(seed)
    values = 10 + 3 * np.sin(np.arange(N) / 5) + rng.normal(0.0, 0.2, N)
    values[at : at + 3] += 30.0  # a spike far above the first range
    times = np.arange(N).astype("datetime64[m]")
    return NabSeries(LabelledSeries(name, N, (Window(at - 5, at + 5),)), times, values)


def _data(groups: str = "ABC") -> dict[str, NabSeries]:
    return {f"{g}/{g.lower()}.csv": _nab(f"{g}/{g.lower()}.csv", 250 + 20 * i, i)
            for i, g in enumerate(groups)}  # fmt: skip


def test_learnt_raw_is_the_detectors_raw_score() -> None:
    s = _nab("A/a.csv", 250, 0)
    cfg = GrowingRangeConfig(learn_points=30, max_contexts=60)
    det, want = GrowingRangeCad(cfg), []
    for v in s.values.tolist():
        det.update(v)
        want.append(0.0 if math.isnan(det.last_raw) else det.last_raw)
    got = learnt_raw(s.values.tolist(), cfg)
    assert got == want
    assert got[250] == 1.0 and det.regrowths >= 1  # the spike grew the range


def test_operator_row_scores_are_its_raw_scores_under_its_rest_period() -> None:
    data = _data("AB")
    run = run_detector("cad_learnt_operator", data, cad_max_contexts=60, round_trip_every=7)
    for key in data:
        raw = run.cad_raw[key].tolist()
        assert rest_masked(raw, LEARNT_REST_PERIOD) == run.scores[key].tolist()
        assert rest_masked(raw, 1) != run.scores[key].tolist()  # control
        assert run.regrowths[key] >= 1
    assert (
        run.operator_ms and run.state_bytes and run.model_version == "cad-learnt-l50-h1000-c60-p20"
    )


def test_joint_logo_lists_every_setting_and_each_fold_picks_one() -> None:
    data = _data()
    out = learnt_logo(data, [20, 300], [0.0, 0.5], [5, 40], 60, ["raw"])
    r = out["scorers"]["raw"]
    assert len(r["settings"]) == 2 * 2 * 2
    assert {(s["learn_points"], s["margin"], s["rest_period"]) for s in r["settings"]} == {
        (lp, m, rest) for lp in (20, 300) for m in (0.0, 0.5) for rest in (5, 40)
    }
    assert [f["held_out"] for f in r["folds"]] == ["A", "B", "C"]
    for fold in r["folds"]:
        assert fold["setting"] == r["settings"][fold["candidate"]]
        # learning 300 values misses the spikes at 250-290, so no fold picks it
        assert fold["setting"]["learn_points"] == 20


def test_bench_reports_the_grid_and_the_rest_periods(tmp_path: Path) -> None:
    out = run_anomaly_bench(
        _folder(tmp_path),
        ["cad_learnt_operator"],
        scorers=["raw"],
        cad_max_contexts=60,
        cad_rest_periods=[5, 40],
        round_trip_every=50,
        cad_learnt_grid=([20], [0.0]),
    )
    assert out["cad_learnt_rest_variants"]["detector"] == "cad_learnt_operator"
    assert out["cad_learnt_variants"]["rest_periods"] == [5, 40]
    regrowths = out["detectors"]["cad_learnt_operator"]["range_regrowths"]
    assert regrowths["keys"] == 3 and regrowths["total"] >= 3


def _folder(root: Path) -> Path:
    """The synthetic series written as a NAB-layout folder."""
    windows: dict[str, list[list[str]]] = {}
    for key, s in _data().items():
        path = root / "data" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps = pd.date_range("2024-01-01", periods=N, freq="5min")
        pd.DataFrame({"timestamp": stamps, "value": s.values}).to_csv(path, index=False)
        w = s.labels.windows[0]
        fmt = "%Y-%m-%d %H:%M:%S.%f"
        windows[key] = [[stamps[w.start].strftime(fmt), stamps[w.end].strftime(fmt)]]
    (root / "labels").mkdir()
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    return root


def test_grid_flags_are_parsed_and_bad_ones_refused() -> None:
    assert _learnt_grid(None, "0") is None
    assert _learnt_grid("20, 50", "0,0.25") == ([20, 50], [0.0, 0.25])
    assert "expected integers" in str(_learnt_grid("20,x", "0"))
    assert "expected numbers" in str(_learnt_grid("20", "0,y"))
    assert ">= 0" in str(_learnt_grid("20", "-0.5"))
    assert ">= 0" in str(_learnt_grid("20", "nan"))
    assert "must hold the learn_points (5000)" in str(_learnt_grid("20,5000", "0"))
    assert "at least one number" in str(_learnt_grid("20", ","))
