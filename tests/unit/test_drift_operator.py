"""The drift / adaptive-window operator logic, without Flink (numbers for clocks)."""

import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from flinkai.config import AdaptiveWindowConfig, DriftConfig
from flinkai.errors import ConfigError
from flinkai.operators.drift import DRIFT_FIELDS, KeyState, WindowRow, parse_options

FAST = DriftConfig(
    period_s=5.0,
    history=3,
    reference_periods=2,
    min_samples=5,
    checks_per_period=1,
    baseline=False,
)
WINDOWS = AdaptiveWindowConfig(base_ms=2000, delay_divisor=10.0, min_ms=500, max_ms=10_000)
SWITCH_MS = 60_000


def stream(n: int = 240, step_ms: int = 500, seed: int = 0) -> list[tuple[np.ndarray, int]]:
    """Two well-separated clusters; the stream switches from one to the other at SWITCH_MS."""
    rng = np.random.default_rng(seed)
    a, b = np.eye(8)[0], np.eye(8)[1]
    out = []
    for i in range(n):
        t = i * step_ms
        centre = a if t < SWITCH_MS else b
        out.append((centre + rng.normal(0, 0.05, 8), t))
    return out


def test_drift_is_raised_after_the_switch_in_milliseconds() -> None:
    state = KeyState("s1", FAST)
    rows = []
    for i, (x, t) in enumerate(stream()):
        step = state.on_event(x.tolist(), t, now_ms=1_000_000 + i)
        assert step.register == [] and step.window is None  # drift only: no timers
        if step.drift is not None:
            rows.append(step.drift)
    assert rows, "the switch must be detected"
    first = rows[0]
    assert first.key == "s1"
    assert SWITCH_MS <= first.period_end_ms <= SWITCH_MS + 2 * 5000
    assert first.period_start_ms >= SWITCH_MS - 5000
    assert first.n >= FAST.min_samples and first.jsd > 0 and first.z > FAST.z_threshold
    assert first.detected_at_ms >= 1_000_000
    assert len(first.as_tuple()) == len(DRIFT_FIELDS)


def test_no_drift_on_a_stationary_stream() -> None:
    state = KeyState("s", FAST)
    rng = np.random.default_rng(1)
    for i in range(400):
        x = np.eye(8)[0] + rng.normal(0, 0.05, 8)
        assert state.on_event(x.tolist(), i * 500, now_ms=i).drift is None


def _round_trip(state: KeyState, drift: DriftConfig, windows: AdaptiveWindowConfig) -> KeyState:
    """What a checkpoint and a restore do to a key: snapshot, bytes, rebuild."""
    return KeyState.from_snapshot(pickle.loads(pickle.dumps(state.snapshot())), drift, windows)


def test_restored_state_continues_exactly_like_the_uninterrupted_one() -> None:
    """A checkpoint/restore round trip before every event changes no result."""
    events = stream(seed=3)
    whole = KeyState("k", FAST, WINDOWS)
    restored = KeyState("k", FAST, WINDOWS)
    got_whole, got_restored = [], []
    for i, (x, t) in enumerate(events):
        got_whole.append(whole.on_event(x.tolist(), t, now_ms=i * 10))
        if i % 7 == 0:
            got_whole.append(whole.on_timer(whole.window.end_ms if whole.window else -1))
        restored = _round_trip(restored, FAST, WINDOWS)
        got_restored.append(restored.on_event(x.tolist(), t, now_ms=i * 10))
        if i % 7 == 0:
            restored = _round_trip(restored, FAST, WINDOWS)
            end = restored.window.end_ms if restored.window else -1
            got_restored.append(restored.on_timer(end))
    assert got_whole == got_restored
    assert any(s.drift is not None for s in got_whole)
    assert any(s.window is not None for s in got_whole)


def test_windows_close_by_timer_and_size_from_the_measured_delay() -> None:
    state = KeyState("k", FAST, WINDOWS)
    first = state.on_event([3.0, 4.0], event_ms=0, now_ms=10_000)  # 10 s behind
    assert first.register == [12_000]  # base_ms for a key's first window
    second = state.on_event([0.0, 2.0], event_ms=9_000, now_ms=11_000)  # 2 s behind
    assert second.register == []
    assert state.on_timer(11_999).window is None  # not this window's timer
    closed = state.on_timer(12_000)
    # mean delay 6 s -> 2000 + 6000/10 = 2600 ms
    assert closed.window == WindowRow("k", 10_000, 12_000, 2, 3.5, 6000.0, 2600)
    assert closed.register == [14_600]  # the next window opens at the timer
    # nothing arrives: the empty window ends the chain, no timer left behind
    idle = state.on_timer(14_600)
    assert idle.window is None and idle.register == []
    again = state.on_event([1.0, 0.0], event_ms=20_000, now_ms=20_000)
    assert again.register == [22_600]  # the sizer keeps the last length


def test_drift_cuts_the_window_short_and_starts_a_short_one() -> None:
    state = KeyState("k", FAST, WINDOWS)
    pending: list[int] = []
    drift_at = None
    for x, t in stream(seed=5):
        now = t  # real-time replay: zero delay
        due = [p for p in pending if p <= now]
        for ts in due:
            pending.remove(ts)
            pending.extend(state.on_timer(ts).register)
        step = state.on_event(x.tolist(), t, now_ms=now)
        for ts in step.delete:
            pending.remove(ts)
        pending.extend(step.register)
        if step.drift is not None:
            drift_at = now
            assert step.register == [now + WINDOWS.min_ms]
            assert len(step.delete) == 1
            # The old distribution's window is emitted now, not mixed with the new one.
            assert step.window is not None and step.window.closed_by == "drift"
            assert step.window.window_end_ms == now and step.window.n >= 1
            assert step.window.next_window_ms == WINDOWS.min_ms
            assert state.window is not None and state.window.n == 1  # only this event
            break
    assert drift_at is not None
    closed = state.on_timer(drift_at + WINDOWS.min_ms).window
    assert closed is not None and closed.n == 1
    assert closed.next_window_ms == WINDOWS.base_ms  # back to the delay rule


def test_zero_embedding_is_rejected_without_touching_the_window() -> None:
    state = KeyState("k", FAST, WINDOWS)
    with pytest.raises(ValueError):
        state.on_event([0.0, 0.0], 0, 0)
    assert state.window is None


@dataclass(frozen=True)
class _FakeConfig:
    drift: DriftConfig


def test_option_precedence_defaults_config_flink_conf_statement() -> None:
    opts = parse_options(
        {"key": "k", "time": "t", "embedding": "e", "drift.history": "7", "window.min_ms": "200"},
        flink_conf={"flinkai.drift.period_s": "5", "flinkai.drift.history": "4"},
        config=_FakeConfig(DriftConfig(period_s=10.0, bins=8)),
    )
    assert (opts.key, opts.time, opts.embedding) == ("k", "t", "e")
    assert opts.drift.bins == 8  # config section
    assert opts.drift.period_s == 5.0  # Flink option over config
    assert opts.drift.history == 7  # statement over Flink option
    assert opts.drift.z_threshold == DriftConfig().z_threshold
    assert opts.window.min_ms == 200 and opts.window.base_ms == AdaptiveWindowConfig().base_ms


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": "k", "time": "t"}, "missing option(s) ['embedding']"),
        ({"key": "k", "time": "t", "embedding": "e", "period": "5"}, "unknown option(s)"),
        ({"key": "k", "time": "t", "embedding": "e", "drift.nope": "1"}, "drift.nope"),
        ({"key": "k", "time": "t", "embedding": "e", "drift.bins": "x"}, "expected int"),
        ({"key": "k", "time": "t", "embedding": "e", "drift.baseline": "maybe"}, "true/false"),
        ({"key": "k", "time": "t", "embedding": "e", "drift.period_s": "0"}, "period_s"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_options(options)
    assert message in str(err.value)


def test_end_of_input_flushes_the_open_window_and_the_last_period() -> None:
    # The switch falls in the last period: only the end-of-input close can report it.
    events = [(x, t) for x, t in stream(n=130) if t < SWITCH_MS + 5000]
    state = KeyState("s", FAST, WINDOWS)
    drifts, counted = [], 0
    for i, (x, t) in enumerate(events):
        step = state.on_event(x.tolist(), t, now_ms=2_000_000 + i)
        if step.drift is not None:
            drifts.append(step.drift)
    assert not drifts, "the last period has not closed yet"
    assert state.window is not None
    open_n, open_end = state.window.n, state.window.end_ms
    end = state.on_end_of_input(now_ms=2_000_500)
    assert end.drift is not None and end.drift.period_end_ms == SWITCH_MS + 5000
    assert end.window is not None and end.window.n == open_n > 0
    assert end.window.window_end_ms == 2_000_500 and end.delete == [open_end]
    counted += end.window.n
    assert state.window is None
    # Nothing left: a second flush emits nothing.
    again = state.on_end_of_input(now_ms=2_000_600)
    assert again.drift is None and again.window is None and counted == open_n


def test_end_of_input_without_windows_only_closes_the_period() -> None:
    state = KeyState("s", FAST)
    for i, (x, t) in enumerate(stream(n=130)):
        state.on_event(x.tolist(), t, now_ms=i)
    step = state.on_end_of_input(now_ms=10_000)
    assert step.window is None and step.delete == []
