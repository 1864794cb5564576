"""One contract for every detector the operator can run (flinkai.anomaly.contract).

Each detector ``model`` can name goes through :func:`check_detector`: identical
scores after a state round trip mid-stream, determinism, plain-data state within the
64 KB per key, and a step p99 within 8 ms. The checker itself is shown to reject
broken detectors, one rule each.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flinkai.anomaly.contract import (
    STATE_BUDGET_BYTES,
    STEP_BUDGET_MS,
    ContractViolation,
    KeyDetector,
    PointScore,
    check_detector,
)
from flinkai.anomaly.detector import DetectorConfig
from flinkai.anomaly.features import STREAM_NUMENTA
from flinkai.anomaly.keyed import new_detector, open_model, restore_detector
from flinkai.anomaly.statistical import ZScoreModel, ZScoreSeriesDetector

START_MS = 1_764_576_000_000
STEP_MS = 300_000


def _points(n: int, seed: int = 3) -> list[tuple[int, float]]:
    """A daily cycle with noise, a level shift at 60 % and a few spikes."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    values = 50 + 10 * np.sin(t * 2 * np.pi / 288) + rng.normal(0, 1.5, n)
    values[int(0.6 * n) :] += 15
    values[t % 997 == 500] += 40
    return [(START_MS + i * STEP_MS, float(v)) for i, v in enumerate(values.round(4))]


Case = tuple[Callable[[], KeyDetector], Callable[[Mapping[str, Any]], KeyDetector]]


def _operator_case(name: str, value_range: tuple[float | None, float | None] = (None, None),
                   **config: Any) -> Case:  # fmt: skip
    """``new`` and ``restore`` exactly as the operator builds a key's detector."""
    model = open_model(name, value_range)
    cfg = DetectorConfig(model=name, value_min=value_range[0], value_max=value_range[1], **config)
    return (lambda: new_detector(model, cfg)), (lambda snap: restore_detector(snap, model, cfg))


@pytest.fixture(scope="module")
def forecasters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two forecaster kinds at their default shape (window 288), trained one epoch."""
    pytest.importorskip("torch")
    from flinkai.anomaly.spec import ModelSpec
    from flinkai.anomaly.train import TrainOptions, train_model

    root = tmp_path_factory.mktemp("contract-nab")
    folder = root / "data" / "synthetic"
    folder.mkdir(parents=True)
    lines = ["timestamp,value"]
    for i, (_, v) in enumerate(_points(1500)):
        ts = np.datetime64("2024-01-01T00:00") + i * np.timedelta64(5, "m")
        lines.append(f"{str(ts).replace('T', ' ')}:00,{v}")
    (folder / "a.csv").write_text("\n".join(lines) + "\n")
    (root / "combined_windows.json").write_text(json.dumps({"synthetic/a.csv": []}))
    options = TrainOptions(epochs=1, threads=1)
    return {
        kind: train_model(ModelSpec(kind=kind), root, root / kind, options).folder
        for kind in ("hybrid", "lstm")
    }


#: (model name, value range, config overrides, points): every kind of key detector.
#: 3,600 points fill the z-score's window and the likelihood's 3,000-point history,
#: so the state is at its largest.
OPERATOR_CASES = {
    "zscore": ("zscore", (None, None), {}, 3600),
    "cad_known_range": ("cad", (0.0, 120.0), {}, 3000),
    "cad_learnt_range": ("cad", (None, None), {}, 3000),
}


@pytest.mark.parametrize("case", list(OPERATOR_CASES))
def test_operator_detectors_keep_the_contract(case: str) -> None:
    name, value_range, config, n = OPERATOR_CASES[case]
    new, restore = _operator_case(name, value_range, **config)
    report = check_detector(new, restore, _points(n))
    assert report.points == n
    assert 0 < report.max_state_bytes <= STATE_BUDGET_BYTES
    assert report.step_p99_ms <= STEP_BUDGET_MS


@pytest.mark.parametrize("kind", ["hybrid", "lstm"])
def test_forecasters_keep_the_contract(kind: str, forecasters: dict[str, Path]) -> None:
    # A forecaster's own state plus the default 3,000-point history is over 64 KB; the
    # operator's documented setting for a forecaster is a 1,500-point history.
    scorer = dataclasses.replace(STREAM_NUMENTA, numenta_history=1500)
    new, restore = _operator_case(str(forecasters[kind]), scorer=scorer)
    report = check_detector(new, restore, _points(2000))
    assert 0 < report.max_state_bytes <= STATE_BUDGET_BYTES


def test_every_model_name_the_operator_knows_is_checked() -> None:
    # A new built-in model name must get a case here.
    from flinkai.anomaly.contextual import CAD_MODEL
    from flinkai.anomaly.statistical import ZSCORE_MODEL

    assert {c[0] for c in OPERATOR_CASES.values()} == {ZSCORE_MODEL, CAD_MODEL}


# --- the checker rejects broken detectors --------------------------------------------


class _Forgetful(ZScoreSeriesDetector):
    """Leaves the scorer out of its snapshot: a restored key starts a fresh likelihood."""

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any], model: Any, config: Any) -> _Forgetful:
        det = super().from_snapshot(snap, model, config)
        out = cls(model, config)
        out.zscore, out.last_ts = det.zscore, det.last_ts
        return out


class _Noisy(ZScoreSeriesDetector):
    """Adds unseeded noise to its scores."""

    def update(self, ts_ms: int, value: float) -> PointScore:
        result = super().update(ts_ms, value)
        return PointScore(result.score + random.random() * 1e-9, result.is_anomaly)


class _Hoarder(ZScoreSeriesDetector):
    """Keeps every value it has seen in its state."""

    def __init__(self, model: Any, config: Any) -> None:
        super().__init__(model, config)
        self.seen: list[float] = []

    def update(self, ts_ms: int, value: float) -> PointScore:
        self.seen.append(value)
        return super().update(ts_ms, value)

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "seen": list(self.seen)}


class _ArrayState(ZScoreSeriesDetector):
    """Stores a numpy array in its snapshot instead of plain data."""

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "extra": np.zeros(3)}


class _Slow(ZScoreSeriesDetector):
    """Spends 12 ms of CPU on every step."""

    def update(self, ts_ms: int, value: float) -> PointScore:
        t0 = time.process_time()
        while time.process_time() - t0 < 0.012:
            pass
        return super().update(ts_ms, value)


def _case(cls: type[ZScoreSeriesDetector]) -> Case:
    model, config = ZScoreModel(), DetectorConfig()
    return (lambda: cls(model, config)), (lambda snap: cls.from_snapshot(snap, model, config))


@pytest.mark.parametrize(
    ("cls", "n", "message"),
    [
        (_Forgetful, 1200, "after a state round trip at point 600"),
        (_Noisy, 50, "not deterministic"),
        (_Hoarder, 9000, "over the 65536-byte budget"),
        (_ArrayState, 50, r"not plain data at snapshot\['extra'\]: ndarray"),
        (_Slow, 20, "over the 8.0 ms budget"),
    ],
)
def test_the_checker_rejects_a_broken_detector(
    cls: type[ZScoreSeriesDetector], n: int, message: str
) -> None:
    new, restore = _case(cls)
    with pytest.raises(ContractViolation, match=message):
        check_detector(new, restore, _points(n))


def test_the_sound_twin_of_the_broken_detectors_passes() -> None:
    # The same points and budgets as the rejections above, with the real detector.
    new, restore = _case(ZScoreSeriesDetector)
    assert check_detector(new, restore, _points(1200)).max_state_bytes > 0
