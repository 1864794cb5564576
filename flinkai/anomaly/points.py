"""Validating raw time-series points ``{"series": ..., "ts": ..., "value": ...}`` (no Flink).

A valid point becomes a :class:`Point`; anything else an :class:`InvalidPoint` with a
dead-letter reason code. Codes shared with the other event parsers
(:class:`flinkai.functions.events.Reason`): ``empty_payload``, ``invalid_utf8``,
``not_json``, ``too_deeply_nested``, ``not_object``, ``missing_field``,
``invalid_field``. Added here:

* ``not_finite``: ``value`` is NaN or infinite (JSON ``NaN``/``Infinity`` parse).

``ts`` is epoch milliseconds (an integer, or a float with no fraction) or an
ISO-8601 string (naive times are UTC). ``value`` must be a JSON number (not a
string, not a boolean). ``series`` must be a non-empty string. Out-of-order
points are caught later, per key, by the operator (``out_of_order``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from flinkai.functions.events import Invalid, decode_object

__all__ = ["REQUIRED_FIELDS", "InvalidPoint", "Point", "parse_point"]

REQUIRED_FIELDS = ("series", "ts", "value")
_MAX_SERIES_CHARS = 512


@dataclass(frozen=True)
class Point:
    """One valid point."""

    series: str
    ts_ms: int
    value: float


@dataclass(frozen=True)
class InvalidPoint:
    """Why a point was rejected (``reason`` is a dead-letter reason code)."""

    reason: str
    detail: str


def _ts_ms(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(2**62) < value < 2**62 else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return round(dt.timestamp() * 1000)
    return None


def parse_point(payload: bytes | None) -> Point | InvalidPoint:
    """Validate one raw point."""
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return InvalidPoint(obj.reason.value, obj.detail)
    missing = [f for f in REQUIRED_FIELDS if obj.get(f) is None]
    if missing:
        return InvalidPoint("missing_field", f"missing or null: {', '.join(missing)}")
    series, ts, value = obj["series"], obj["ts"], obj["value"]
    if not isinstance(series, str) or not series.strip() or len(series) > _MAX_SERIES_CHARS:
        return InvalidPoint("invalid_field", f"series must be a non-empty string of at most "
                            f"{_MAX_SERIES_CHARS} characters")  # fmt: skip
    ts_ms = _ts_ms(ts)
    if ts_ms is None:
        return InvalidPoint(
            "invalid_field", f"ts {str(ts)[:64]!r} is neither epoch ms nor ISO-8601"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        return InvalidPoint("invalid_field", f"value must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        return InvalidPoint("not_finite", f"value {number!r} is not a finite number")
    return Point(series, ts_ms, number)
