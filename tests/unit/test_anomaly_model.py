"""The anomaly forecaster: ONNX step vs torch full-window forward, state round trips.

Models are trained here, small and briefly, on the probationary parts of a few NAB
series (or of a synthetic NAB-layout folder when the shared datasets are absent).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from flinkai.anomaly.detector import DetectorConfig, PointRejected, SeriesDetector
from flinkai.anomaly.spec import ModelSpec, read_meta
from flinkai.anomaly.step import RecurrentState, StepModel
from flinkai.anomaly.train import TrainOptions, TrainResult, series_inputs, train_model
from flinkai.datasets import datasets_dir

torch = pytest.importorskip("torch")

SHARED_NAB = datasets_dir() / "nab"
STEPS = 500
WINDOW = 64  # well under STEPS, so the sliding KV cache is exercised


def _synthetic_nab(root: Path, bump: slice | None = None) -> Path:
    """A NAB-layout folder with two daily-periodic series and no windows.

    ``bump`` adds 5.0 to those rows of every series.
    """
    windows: dict[str, list[object]] = {}
    for name in ("a", "b"):
        ts = np.datetime64("2024-01-01T00:00") + np.arange(1200) * np.timedelta64(5, "m")
        values = np.sin(np.arange(1200) * 2 * np.pi / 288) + 0.1 * np.random.default_rng(1).normal(
            size=1200
        )
        if bump is not None:
            values[bump] += 5.0
        folder = root / "data" / "synthetic"
        folder.mkdir(parents=True, exist_ok=True)
        lines = ["timestamp,value"] + [
            f"{str(t).replace('T', ' ')}:00,{v:.5f}" for t, v in zip(ts, values, strict=True)
        ]
        (folder / f"{name}.csv").write_text("\n".join(lines) + "\n")
        windows[f"synthetic/{name}.csv"] = []
    (root / "combined_windows.json").write_text(json.dumps(windows))
    return root


@pytest.fixture(scope="session")
def nab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if SHARED_NAB.is_dir():
        return SHARED_NAB
    return _synthetic_nab(tmp_path_factory.mktemp("nab"))


@pytest.fixture(scope="session")
def anomaly_models(tmp_path_factory: pytest.TempPathFactory, nab_dir: Path) -> dict[str, Path]:
    """Tiny hybrid and LSTM-only models (a few epochs, window 64)."""
    root = tmp_path_factory.mktemp("anomaly-models")
    groups = ["realTraffic"] if nab_dir == SHARED_NAB else None
    out = {}
    for kind in ("hybrid", "lstm"):
        spec = ModelSpec(kind=kind, hidden=16, attn_dim=8, heads=2, window=WINDOW)
        result = train_model(spec, nab_dir, root / kind, TrainOptions(epochs=3, threads=1), groups)
        out[kind] = result.folder
    # Gated attention; a high rate so the gates (0 at the start) open within 3 epochs.
    spec = ModelSpec(kind="hybrid", hidden=16, attn_dim=8, heads=2, window=WINDOW, gate=True)
    opts = TrainOptions(epochs=3, threads=1, lr=0.05)
    out["hybrid_gate"] = train_model(spec, nab_dir, root / "hybrid_gate", opts, groups).folder
    return out


def _inputs(n: int) -> np.ndarray:
    t = np.arange(n)
    values = 10 + np.sin(t * 2 * np.pi / 48) + 0.05 * np.cos(t * 1.7)
    x, _ = series_inputs(values.tolist(), (1_700_000_000_000 + t * 300_000).tolist())
    return x


@pytest.mark.parametrize("kind", ["hybrid", "lstm", "hybrid_gate"])
def test_onnx_step_equals_torch_full_window(kind: str, anomaly_models: dict[str, Path]) -> None:
    from flinkai.anomaly.forecaster import Forecaster

    folder = anomaly_models[kind]
    spec = read_meta(folder).spec
    model = Forecaster(spec)
    model.load_state_dict(torch.load(folder / "model.pt"))
    model.eval()
    if kind == "hybrid_gate":  # the gates opened, so the attention branch is in the output
        assert (
            spec.gate
            and min(abs(float(model.gate_attn.detach())), abs(float(model.gate_ff.detach()))) > 1e-3
        )
    x = _inputs(STEPS)
    with torch.no_grad():
        full = model(torch.from_numpy(x[None]))[0].numpy()
    step = StepModel(folder)
    state = RecurrentState.zeros(spec)
    got = []
    for t in range(STEPS):
        y, state = step.step(x[t], state)
        got.append(y)
    assert len(got) == STEPS
    np.testing.assert_allclose(np.asarray(got), full, atol=1e-4, rtol=0)
    if kind == "hybrid":
        assert state.filled == WINDOW  # the cache slid past its length


def test_attention_sees_only_the_window(anomaly_models: dict[str, Path]) -> None:
    """Negative control: a step model fed a wrong cache mask departs from torch."""
    from flinkai.anomaly.forecaster import Forecaster

    folder = anomaly_models["hybrid"]
    spec = read_meta(folder).spec
    model = Forecaster(spec)
    model.load_state_dict(torch.load(folder / "model.pt"))
    model.eval()
    x = _inputs(200)
    with torch.no_grad():
        full = model(torch.from_numpy(x[None]))[0].numpy()
    step = StepModel(folder)
    state = RecurrentState.zeros(spec)
    worst = 0.0
    for t in range(200):
        state.filled = spec.window  # pretend the zero rows of the empty cache are real
        y, state = step.step(x[t], state)
        worst = max(worst, abs(y - float(full[t])))
    assert worst > 1e-4


def test_state_round_trip_gives_the_same_scores(anomaly_models: dict[str, Path]) -> None:
    model = StepModel(anomaly_models["hybrid"])
    config = DetectorConfig(model=str(anomaly_models["hybrid"]))
    rng = np.random.default_rng(3)
    values = np.sin(np.arange(400) / 7.0) + 0.1 * rng.normal(size=400)
    values[300] += 8.0
    ts = 1_700_000_000_000 + np.arange(400) * 60_000
    straight = SeriesDetector(model, config)
    plain = [straight.update(int(t), float(v)).score for t, v in zip(ts, values, strict=True)]
    blob = pickle.dumps(SeriesDetector(model, config).snapshot())
    restored = []
    for t, v in zip(ts, values, strict=True):
        det = SeriesDetector.from_snapshot(pickle.loads(blob), model, config)
        restored.append(det.update(int(t), float(v)).score)
        blob = pickle.dumps(det.snapshot())
    assert restored == plain
    assert max(plain[290:310]) > 0.3 and max(plain[290:310]) == max(plain[100:])
    assert len(blob) <= 64 * 1024


def test_snapshot_is_plain_data(anomaly_models: dict[str, Path]) -> None:
    model = StepModel(anomaly_models["hybrid"])
    det = SeriesDetector(model, DetectorConfig())
    det.update(1, 1.0)

    def plain(v: object) -> bool:
        if isinstance(v, dict):
            return all(isinstance(k, str) and plain(x) for k, x in v.items())
        if isinstance(v, list | tuple):
            return all(plain(x) for x in v)
        return v is None or isinstance(v, int | float | str | bytes)

    snap = det.snapshot()
    assert plain(snap), snap.keys()
    assert snap["version"] == SeriesDetector.SNAPSHOT_VERSION
    assert snap["model_version"] == model.model_version


def test_other_model_version_restarts_model_state(anomaly_models: dict[str, Path]) -> None:
    hybrid = StepModel(anomaly_models["hybrid"])
    lstm = StepModel(anomaly_models["lstm"])
    det = SeriesDetector(hybrid, DetectorConfig())
    for i in range(20):
        det.update(i, float(i % 5))
    moved = SeriesDetector.from_snapshot(det.snapshot(), lstm, DetectorConfig())
    assert moved.state.k is None and moved.forecast is None
    assert moved.normalizer == det.normalizer and moved.last_ts == 19
    with pytest.raises(ValueError, match="version"):
        SeriesDetector.from_snapshot({**det.snapshot(), "version": 99}, hybrid, DetectorConfig())


def test_rejected_points_leave_state_unchanged(anomaly_models: dict[str, Path]) -> None:
    det = SeriesDetector(StepModel(anomaly_models["lstm"]), DetectorConfig())
    det.update(10, 1.0)
    before = pickle.dumps(det.snapshot())
    for ts, value, reason in [(11, float("nan"), "not_finite"), (10, 2.0, "out_of_order"),
                              (5, 2.0, "out_of_order"), (12, float("inf"), "not_finite")]:  # fmt: skip
        with pytest.raises(PointRejected) as info:
            det.update(ts, value)
        assert info.value.reason == reason
    assert pickle.dumps(det.snapshot()) == before


def test_validation_rows_are_held_out(tmp_path: Path) -> None:
    """Changing the held-out end of the probationary part leaves training untouched.

    The model is causal and the training loss covers only the rows before the split,
    so the training loss curve is identical; the validation loss sees the change.
    Negative control: without a split the same change moves the training loss.
    """
    spec = ModelSpec(kind="hybrid", hidden=8, attn_dim=4, heads=2, window=32, gate=True)
    # 1200 rows: 180 probationary, 179 targets, the last 36 held out at 0.2.
    bump = slice(170, 180)
    plain, bumped = _synthetic_nab(tmp_path / "plain"), _synthetic_nab(tmp_path / "bump", bump)

    def fit(root: Path, val: float, model: ModelSpec = spec) -> TrainResult:
        opts = TrainOptions(epochs=4, threads=1, lr=0.02, val_fraction=val)
        return train_model(model, root, tmp_path / f"m-{root.name}-{val}", opts)

    a, b = fit(plain, 0.2), fit(bumped, 0.2)
    assert a.losses == b.losses and len(a.losses) == 4
    assert a.val_losses != b.val_losses and len(a.val_losses) == 5  # + the final weights
    assert a.best_val_loss == min(a.val_losses) == a.val_losses[a.best_epoch]
    assert read_meta(a.folder).training["best_val_loss"] == a.best_val_loss
    lstm = ModelSpec(kind="lstm", hidden=8)  # cheaper; the control is about the split
    assert fit(plain, 0.0, lstm).losses != fit(bumped, 0.0, lstm).losses


def test_kept_weights_are_the_best_validation_epoch(tmp_path: Path) -> None:
    """Early stopping keeps the weights with the lowest validation loss, not the last."""
    from flinkai.anomaly.forecaster import Forecaster
    from flinkai.anomaly.nab import load_nab_folder
    from flinkai.anomaly.train import probation_sequences

    root = _synthetic_nab(tmp_path / "nab")
    spec = ModelSpec(kind="lstm", hidden=8)
    # A rate this high overshoots, so some later epoch is worse than the best one.
    opts = TrainOptions(epochs=12, threads=1, lr=0.5, val_fraction=0.2, patience=3)
    result = train_model(spec, root, tmp_path / "m", opts)
    assert result.best_val_loss == min(result.val_losses)
    assert result.val_losses[-1] > result.best_val_loss  # evidence: the last was not the best
    model = Forecaster(spec)
    model.load_state_dict(torch.load(result.folder / "model.pt"))
    model.eval()
    total, count = 0.0, 0
    for _, x, y in probation_sequences(load_nab_folder(root)):
        n_val = round(0.2 * len(y))
        with torch.no_grad():
            pred = model(torch.from_numpy(x[None]))[0, : len(y)]
        rows = torch.nn.functional.smooth_l1_loss(pred, torch.from_numpy(y), reduction="none")
        total += float(rows[len(y) - n_val :].sum())
        count += n_val
    assert abs(total / count - result.best_val_loss) < 1e-5
