"""Parsing raw time-series points and the operator's per-row logic (no Flink)."""

from __future__ import annotations

import pytest

from flinkai.anomaly.points import InvalidPoint, Point, parse_point
from flinkai.errors import ConfigError
from flinkai.operators.anomaly import parse_options


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, "empty_payload"),
        (b"\xff\xfe", "invalid_utf8"),
        (b"not json", "not_json"),
        (b"[1, 2]", "not_object"),
        (b'{"series": "a", "ts": 1}', "missing_field"),
        (b'{"series": "a", "ts": 1, "value": null}', "missing_field"),
        (b'{"series": "", "ts": 1, "value": 1}', "invalid_field"),
        (b'{"series": "a", "ts": "yesterday", "value": 1}', "invalid_field"),
        (b'{"series": "a", "ts": 1.5, "value": 1}', "invalid_field"),
        (b'{"series": "a", "ts": 1, "value": "1.0"}', "invalid_field"),
        (b'{"series": "a", "ts": 1, "value": true}', "invalid_field"),
        (b'{"series": "a", "ts": 1, "value": NaN}', "not_finite"),
        (b'{"series": "a", "ts": 1, "value": -Infinity}', "not_finite"),
    ],
)
def test_invalid_points_get_a_reason(payload: bytes | None, reason: str) -> None:
    result = parse_point(payload)
    assert isinstance(result, InvalidPoint)
    assert result.reason == reason, result.detail


def test_valid_points() -> None:
    assert parse_point(b'{"series": "s", "ts": 1700000000000, "value": 3}') == Point(
        "s", 1_700_000_000_000, 3.0
    )
    iso = parse_point(b'{"series": "s", "ts": "2023-11-14T22:13:20Z", "value": -1.5}')
    assert iso == Point("s", 1_700_000_000_000, -1.5)


def test_operator_options_layering_and_errors() -> None:
    opts = parse_options(
        {"key": "series", "time": "ts_ms", "value": "v", "offset": "o", "scorer.warmup": "5"},
        {"flinkai.anomaly.threshold": "0.7", "flinkai.anomaly.scorer.warmup": "9"},
    )
    assert opts.detector.threshold == 0.7
    assert opts.detector.scorer.warmup == 5  # the statement wins over the Flink option
    assert opts.carried == {"offset": "o"}
    with pytest.raises(ConfigError, match="missing"):
        parse_options({"key": "k", "time": "t"})
    with pytest.raises(ConfigError, match="unknown"):
        parse_options({"key": "k", "time": "t", "value": "v", "window": "3"})
    with pytest.raises(ConfigError, match="short_window"):
        parse_options({"key": "k", "time": "t", "value": "v", "scorer.short_window": "0"})
