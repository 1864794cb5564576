"""SQL function for validating raw feature events ``{"id": ..., "features": [...]}``.

CREATE TEMPORARY FUNCTION parse_feature_event AS 'feature_events.parse_feature_event' LANGUAGE PYTHON;

Returns ROW<id STRING, features ARRAY<FLOAT>, error_reason STRING, error_detail STRING,
payload_base64 STRING>: the event, or NULLs, the reason for the dead-letter topic and
the exact payload in base64.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import udf

from flinkai.functions.events import Invalid, payload_base64
from flinkai.functions.feature_events import FeatureEvent
from flinkai.functions.feature_events import parse_feature_event as _parse

__all__ = ["parse_feature_event"]

FEATURE_EVENT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("id", DataTypes.STRING()),
        DataTypes.FIELD("features", DataTypes.ARRAY(DataTypes.FLOAT())),
        DataTypes.FIELD("error_reason", DataTypes.STRING()),
        DataTypes.FIELD("error_detail", DataTypes.STRING()),
        # invalid events only; see CLICK_ROW in events.py
        DataTypes.FIELD("payload_base64", DataTypes.STRING()),
    ]
)


def _row(payload: bytes | None) -> tuple[object, ...]:
    result = _parse(payload)
    if isinstance(result, FeatureEvent):
        return (result.id, result.features, None, None, None)
    assert isinstance(result, Invalid)
    return (None, None, result.reason.value, result.detail, payload_base64(payload))


@udf(result_type=FEATURE_EVENT_ROW, func_type="pandas")
def parse_feature_event(payloads: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(
        [_row(p) for p in payloads], columns=[f.name for f in FEATURE_EVENT_ROW.fields]
    )
