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

from typing import Any

import numpy as np
import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai import metrics
from flinkai.errors import ConfigError
from flinkai.functions.predict import PredictConfig, PredictFunction
from flinkai.functions.rows import row_field
from flinkai.runtime.environment import config_from_function_context

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
        self._fn = PredictFunction(_predict_config(config_from_function_context(function_context)))
        self._fn.open()
        group = metrics.flinkai_group(function_context.get_metric_group())
        self._rows = group.counter(metrics.SCORED_ROWS.name)
        self._failed = group.counter(metrics.SCORING_FAILED_ROWS.name)

    def eval(
        self, features: pd.Series | pd.DataFrame, field: str | pd.Series | None = None
    ) -> pd.DataFrame:
        if isinstance(features, pd.DataFrame):  # a ROW argument: score the named field
            features = row_field(features, field, "predict")
        # Arrow hands ARRAY<FLOAT> over as numpy arrays (None for a null array).
        rows = [None if v is None else np.asarray(v) for v in features]
        result = self._fn(rows)
        failed = sum(e is not None for e in result.errors)
        self._rows.inc(len(rows) - failed)
        self._failed.inc(failed)
        return pd.DataFrame(
            {
                "score": result.scores,
                "model_version": [result.model_version] * len(rows),
                "error": result.errors,
            }
        )

    def close(self) -> None:
        self._fn.close()


predict = udf(_Predict(), result_type=SCORE_ROW, func_type="pandas")
