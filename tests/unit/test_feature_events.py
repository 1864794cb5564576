"""parse_feature_event: shape checks, with the reason codes of the DLQ contract."""

import pytest

from flinkai.functions.events import Invalid, Reason
from flinkai.functions.feature_events import FeatureEvent, parse_feature_event


def test_a_well_formed_event() -> None:
    event = parse_feature_event(b'{"id": 7, "features": [1, 2.5, -3]}')
    assert event == FeatureEvent("7", [1.0, 2.5, -3.0])


@pytest.mark.parametrize(
    ("payload", "reason", "detail"),
    [
        (None, Reason.EMPTY_PAYLOAD, "empty"),
        (b"\xff", Reason.INVALID_UTF8, "byte 0"),
        (b"[1, 2]", Reason.NOT_OBJECT, "list"),
        (b'{"features": [1]}', Reason.MISSING_FIELD, "id"),
        (b'{"id": true, "features": [1]}', Reason.INVALID_FIELD, "id must be"),
        (b'{"id": "a", "features": {"x": 1}}', Reason.INVALID_FIELD, "list of numbers"),
        (b'{"id": "a", "features": [1, false]}', Reason.INVALID_FIELD, "features[1]"),
    ],
)
def test_bad_events_name_their_reason(payload: bytes | None, reason: Reason, detail: str) -> None:
    result = parse_feature_event(payload)
    assert isinstance(result, Invalid)
    assert result.reason == reason and detail in result.detail
