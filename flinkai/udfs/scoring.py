"""``predict``: score numeric feature vectors with an ONNX model, as a pandas SQL function.

    CREATE TEMPORARY FUNCTION predict AS 'scoring.predict' LANGUAGE PYTHON;
    SELECT predict(features).score, predict(features).model_version, predict(features).error ...
    SELECT predict(parse_feature_event(payload), 'features') ...

Takes ``features ARRAY<FLOAT>``, or a ROW and the name of such a field (then Flink runs
the function that made the row and the model in one Python operator), and returns
ROW<score ARRAY<FLOAT>, model_version STRING, error STRING>. The model named by the
``predict`` config section is loaded once per worker process in ``open()`` and shared
by every instance there. Invalid rows (null, wrong length, NaN) come back with
``error`` set and no score; they are never dropped.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai import metrics
from flinkai.config import PredictConfig
from flinkai.errors import ConfigError
from flinkai.functions.events import Reason
from flinkai.functions.guard import internal_error_detail
from flinkai.functions.predict import PredictFunction
from flinkai.functions.rows import row_field
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import row_guard

__all__ = ["predict"]

SCORE_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("score", DataTypes.ARRAY(DataTypes.FLOAT())),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("error", DataTypes.STRING()),
    ]
)


def _predict_config(config: Any) -> PredictConfig:
    section = getattr(config, "predict", None)
    if not isinstance(section, PredictConfig):
        raise ConfigError("the flinkai config has no `predict` section (PredictConfig)")
    return section


class _Predict(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._fn = PredictFunction(_predict_config(config))
        self._fn.open()
        self._guard = row_guard(function_context, config, "predict")
        group = metrics.flinkai_group(function_context.get_metric_group())
        self._rows = group.counter(metrics.SCORED_ROWS.name)
        self._failed = group.counter(metrics.SCORING_FAILED_ROWS.name)

    def _score(self, rows: Sequence[object]) -> list[tuple[object, str | None, str | None]]:
        result = self._fn(rows)
        return [
            (score, result.model_version, error)
            for score, error in zip(result.scores, result.errors, strict=True)
        ]

    def eval(
        self, features: pd.Series | pd.DataFrame, field: str | pd.Series | None = None
    ) -> pd.DataFrame:
        if isinstance(features, pd.DataFrame):  # a ROW argument: score the named field
            features = row_field(features, field, "predict")
        # Arrow hands ARRAY<FLOAT> over as numpy arrays (None for a null array).
        rows = [None if v is None else np.asarray(v) for v in features]
        out = self._guard.batch(rows, self._score, _internal_error_row)
        failed = sum(r[2] is not None for r in out)
        self._rows.inc(len(out) - failed)
        self._failed.inc(failed)
        return pd.DataFrame(out, columns=["score", "model_version", "error"])

    def close(self) -> None:
        self._fn.close()


def _internal_error_row(_: object, exc: Exception) -> tuple[None, None, str]:
    return (None, None, f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(exc)}")


predict = udf(_Predict(), result_type=SCORE_ROW, func_type="pandas")
