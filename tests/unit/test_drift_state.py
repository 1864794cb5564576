"""Drift key state in checkpoints is plain data, rebuilt with the config of the restored job."""

from __future__ import annotations

import io
import pickle
from dataclasses import replace

import numpy as np
import pytest

from flinkai.config import AdaptiveWindowConfig, DriftConfig
from flinkai.operators.drift import KeyState
from tests.unit.test_drift_operator import FAST, SWITCH_MS, WINDOWS, stream


def _fed(n: int, drift: DriftConfig = FAST, windows: AdaptiveWindowConfig = WINDOWS) -> KeyState:
    state = KeyState("k", drift, windows)
    for i, (x, t) in enumerate(stream()[:n]):
        state.on_event(x.tolist(), t, now_ms=i * 10)
    return state


class _PlainDataOnly(pickle.Unpickler):
    """Loads numbers, strings, containers and numpy arrays; refuses any other class."""

    def find_class(self, module: str, name: str) -> object:
        if module == "builtins" or module.split(".")[0] == "numpy":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"state holds {module}.{name}")


def test_snapshot_holds_numbers_and_arrays_only() -> None:
    data = pickle.dumps(_fed(100).snapshot())
    snap = _PlainDataOnly(io.BytesIO(data)).load()
    assert snap["version"] == KeyState.SNAPSHOT_VERSION
    assert b"DriftConfig" not in data and b"flinkai" not in data
    # the check itself: the old layout, a pickled KeyState, is refused
    with pytest.raises(pickle.UnpicklingError, match="flinkai"):
        _PlainDataOnly(io.BytesIO(pickle.dumps(_fed(10)))).load()


def test_a_changed_threshold_applies_to_restored_keys() -> None:
    # 115 events: warm, just before the switch at SWITCH_MS (event 120)
    before = _fed(115)
    assert before.detector.last is not None and before.detector.last.warm
    strict = replace(FAST, z_threshold=1e9)
    same = KeyState.from_snapshot(pickle.loads(pickle.dumps(before.snapshot())), FAST, WINDOWS)
    stricter = KeyState.from_snapshot(before.snapshot(), strict, WINDOWS)
    assert stricter.detector.cfg.z_threshold == 1e9
    drifts_same, drifts_strict = 0, 0
    for i, (x, t) in enumerate(stream()[115:], start=115):
        drifts_same += same.on_event(x.tolist(), t, now_ms=i * 10).drift is not None
        drifts_strict += stricter.on_event(x.tolist(), t, now_ms=i * 10).drift is not None
    assert t > SWITCH_MS
    assert drifts_same >= 1  # the old config raises the drift after the switch ...
    assert drifts_strict == 0  # ... the restored job's config does not


def test_new_window_bounds_hold_from_the_first_restored_window() -> None:
    state = _fed(50)
    narrow = replace(WINDOWS, min_ms=500, max_ms=900)
    restored = KeyState.from_snapshot(state.snapshot(), FAST, narrow)
    assert restored.sizer is not None and restored.sizer.current_ms <= 900
    assert (
        restored.window is not None and restored.window == state.window
    )  # the open window goes on
    step = restored.on_timer(restored.window.end_ms)
    assert step.window is not None and step.window.next_window_ms <= 900


def test_an_incompatible_detector_shape_warms_up_again() -> None:
    state = _fed(100)
    other = replace(FAST, bins=FAST.bins * 2)
    restored = KeyState.from_snapshot(state.snapshot(), other, WINDOWS)
    assert restored.detector.cfg.bins == other.bins
    assert restored.detector.last is None and restored.detector.drift_count == 0
    # the window state does not depend on the detector, so it survives
    assert restored.window == state.window
    x, t = stream()[100]
    restored.on_event(x.tolist(), t, now_ms=1)  # and the key keeps working


def test_a_longer_history_keeps_every_restored_value() -> None:
    state = _fed(100)
    longer = replace(FAST, history=FAST.history + 2)
    restored = KeyState.from_snapshot(state.snapshot(), longer, WINDOWS)
    before = list(state.detector._recent.histories["jsd"])
    after = list(restored.detector._recent.histories["jsd"])
    assert after == before and len(before) == FAST.history


def test_unknown_snapshot_version_is_refused() -> None:
    snap = _fed(10).snapshot()
    snap["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        KeyState.from_snapshot(snap, FAST, WINDOWS)


def test_without_windows_the_snapshot_has_no_sizer() -> None:
    state = KeyState("k", FAST)
    x, t = stream()[0]
    state.on_event(np.asarray(x).tolist(), t, now_ms=0)
    snap = state.snapshot()
    assert snap["sizer"] is None and snap["window"] is None
    assert KeyState.from_snapshot(snap, FAST).sizer is None
