"""Validate raw feature events ``{"id": ..., "features": [numbers]}`` for ``predict``.

Only the shape of the record is checked here: an object with an ``id`` and a list of
numbers. Whether the vector fits the model (its length, NaN or infinity, which
Python's JSON reader accepts) is ``predict``'s check, made against the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass

from flinkai.functions.events import Invalid, Reason, decode_object, is_utf8_safe

__all__ = ["FeatureEvent", "parse_feature_event"]


@dataclass(frozen=True)
class FeatureEvent:
    """A well-formed feature event."""

    id: str
    features: list[float]


def parse_feature_event(payload: bytes | None) -> FeatureEvent | Invalid:
    """Validate one raw record value."""
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return obj
    missing = [f for f in ("id", "features") if obj.get(f) is None]
    if missing:
        return Invalid(Reason.MISSING_FIELD, ", ".join(missing))
    ident, features = obj["id"], obj["features"]
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        return Invalid(Reason.INVALID_FIELD, "id must be a string or an integer")
    if isinstance(ident, str) and not is_utf8_safe(ident):
        return Invalid(Reason.INVALID_FIELD, "id holds a lone UTF-16 surrogate")
    if not isinstance(features, list):
        return Invalid(Reason.INVALID_FIELD, "features must be a list of numbers")
    values: list[float] = []
    for i, v in enumerate(features):
        if not isinstance(v, int | float) or isinstance(v, bool):
            return Invalid(Reason.INVALID_FIELD, f"features[{i}] is not a number")
        try:
            values.append(float(v))
        except OverflowError:  # an integer literal beyond float range (up to 4,300 digits)
            return Invalid(Reason.INVALID_FIELD, f"features[{i}] is out of float range")
    return FeatureEvent(str(ident), values)
