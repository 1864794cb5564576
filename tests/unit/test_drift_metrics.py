"""Per-key drift metrics on a passed-in metric group, and the cusum operator option."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from flinkai import metrics
from flinkai.config import DriftConfig
from flinkai.drift.sequential import CusumConfig, CusumDriftDetector
from flinkai.errors import ConfigError
from flinkai.operators.drift import KeyState, parse_options


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


class _Group:
    """A Flink metric group double: counters and key/value sub-groups, by path."""

    def __init__(self, path: tuple[str, ...] = (), root: dict | None = None) -> None:
        self.path = path
        self.series: dict[tuple[str, ...], _Counter] = {} if root is None else root

    def counter(self, name: str) -> _Counter:
        return self.series.setdefault((*self.path, name), _Counter())

    def add_group(self, key: str, value: str) -> _Group:
        return _Group((*self.path, f"{key}={value}"), self.series)


def test_score_gauge_and_detection_counter_are_per_key() -> None:
    group = _Group()
    m = metrics.DriftKeyMetrics(group)
    m.score("a", 0.25)
    m.score("b", 1.5)
    m.score("a", 0.875)
    m.detected("b")
    m.detected("b")
    assert group.series[("key=a", "drift_score_milli")].value == 875
    assert group.series[("key=b", "drift_score_milli")].value == 1500
    assert group.series[("key=b", "drift_detected_total")].value == 2
    assert ("key=a", "drift_detected_total") not in group.series
    assert {"drift_score_milli", "drift_detected_total"} <= set(metrics.METRICS)
    assert (
        metrics.prometheus_name(metrics.DRIFT_DETECTED)
        == "flink_taskmanager_job_task_operator_flinkai_key_drift_detected_total"
    )


def test_detector_score_drives_the_gauge_to_an_alarm() -> None:
    """The exported score crosses 1000 exactly when the detector raises a drift."""
    cfg = CusumConfig(reference_events=20, null_events=100, chains=64, chain_events=1000)
    det = CusumDriftDetector(cfg)
    group = _Group()
    m = metrics.DriftKeyMetrics(group)
    rng = np.random.default_rng(0)
    fired = None
    for i in range(400):
        centre = np.eye(8)[0 if i < 300 else 1]
        event = det.update(centre + rng.normal(0, 0.3, 8), i * 0.5)
        m.score("k", det.score)
        if event is not None:
            m.detected("k")
            fired = i
            break
        assert group.series.get(("key=k", "drift_score_milli"), _Counter()).value <= 1000
    assert fired is not None and fired >= 300
    assert group.series[("key=k", "drift_score_milli")].value > 1000
    assert group.series[("key=k", "drift_detected_total")].value == 1


def test_operator_options_choose_the_detector() -> None:
    base = {"key": "k", "time": "t", "embedding": "e"}
    assert parse_options(base).detector == "jsd"
    assert parse_options(base).cusum_cfg is None
    opts = parse_options(base | {"detector": "cusum", "cusum.arl_events": "1e5"})
    assert opts.detector == "cusum" and opts.cusum_cfg == CusumConfig(arl_events=1e5)
    from_conf = parse_options(
        base, {"flinkai.drift_detector": "cusum", "flinkai.cusum.k_fast": "2"}
    )
    assert from_conf.detector == "cusum" and from_conf.cusum.k_fast == 2.0
    with pytest.raises(ConfigError, match="unknown detector"):
        parse_options(base | {"detector": "adwin"})
    with pytest.raises(ConfigError, match=r"cusum\.nope"):
        parse_options(base | {"detector": "cusum", "cusum.nope": "1"})
    with pytest.raises(ConfigError, match="arl_events"):
        parse_options(base | {"cusum.arl_events": "1"})


def test_key_state_runs_cusum_and_switching_kind_starts_afresh() -> None:
    cfg = CusumConfig(reference_events=20, null_events=100, chains=64, chain_events=1000)
    state = KeyState("k", DriftConfig(), cusum_cfg=cfg)
    rng = np.random.default_rng(1)
    drifts = []
    for i in range(400):
        centre = np.eye(8)[0 if i < 300 else 1]
        step = state.on_event((centre + rng.normal(0, 0.3, 8)).tolist(), i * 500, now_ms=i)
        if step.drift is not None:
            drifts.append(step.drift)
        snap = pickle.loads(pickle.dumps(state.snapshot()))
        state = KeyState.from_snapshot(snap, DriftConfig(), cusum_cfg=cfg)
    assert len(drifts) == 1 and drifts[0].period_end_ms >= 300 * 500
    assert isinstance(state.detector, CusumDriftDetector)
    as_jsd = KeyState.from_snapshot(state.snapshot(), DriftConfig())
    assert as_jsd.detector.drift_count == 0  # the other kind's state is not reused
