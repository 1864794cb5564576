"""``text_to_vector``: text embedding as a vectorised (pandas) SQL function.

    CREATE TEMPORARY FUNCTION text_to_vector AS 'vectorizer.text_to_vector' LANGUAGE PYTHON;
    SELECT text_to_vector(click_text).embedding, text_to_vector(click_text).model_version ...
    SELECT text_to_vector(parse_click(payload), 'click_text') ...

Returns ROW<embedding ARRAY<FLOAT>, model_version STRING, error STRING, embedding_f32
BYTES>: ``embedding`` by default, ``embedding_f32`` (raw little-endian float32) instead
when ``embedding.vector_encoding`` is ``f32``. The model is loaded once per worker
process in ``open()`` and shared by every instance there.

The second form embeds one field of a ROW made by another Python function. Flink then
runs both functions in one Python operator: ``text_to_vector(c.click_text)`` needs a
Java projection between them, which splits them into two Python operators, each
waiting for its own bundle, which multiplies the latency at low rates
(``flinkai bench embed --variants latency`` measures it).
"""

import time
from collections.abc import Sequence

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai import metrics
from flinkai.functions.embedding import EmbeddingFunction
from flinkai.functions.events import Reason
from flinkai.functions.guard import internal_error_detail
from flinkai.functions.rows import row_field
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import row_guard

__all__ = ["text_to_vector"]

EMBEDDING_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("embedding", DataTypes.ARRAY(DataTypes.FLOAT())),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("error", DataTypes.STRING()),
        # Set instead of ``embedding`` when embedding.vector_encoding is f32.
        DataTypes.FIELD("embedding_f32", DataTypes.BYTES()),
    ]
)
_COLUMNS = [f.name for f in EMBEDDING_ROW.fields]


class _TextToVector(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._fn = EmbeddingFunction(config)
        self._fn.open()
        self._f32 = config.embedding.vector_encoding == "f32"
        self._guard = row_guard(function_context, config, "text_to_vector")
        group = metrics.flinkai_group(function_context.get_metric_group())
        self._rows = group.counter(metrics.EMBEDDED_ROWS.name)
        self._failed = group.counter(metrics.EMBEDDING_FAILED_ROWS.name)
        self._batch_ms = metrics.gauge(group, metrics.EMBEDDING_BATCH_MS)

    def _embed(self, texts: Sequence[object]) -> list[tuple[object, ...]]:
        started = time.perf_counter()
        result = self._fn(list(texts))  # type: ignore[arg-type]
        elapsed_ms = (time.perf_counter() - started) * 1000
        if any(e is None for e in result.errors):  # a batch of only invalid rows never ran
            self._batch_ms(elapsed_ms)
        version = result.model_version
        if self._f32:
            return [
                (None, version, error, None if v is None else v.astype("<f4", copy=False).tobytes())
                for v, error in zip(result.embeddings, result.errors, strict=True)
            ]
        return [
            (vector, version, error, None)
            for vector, error in zip(result.embeddings, result.errors, strict=True)
        ]

    def eval(
        self, texts: pd.Series | pd.DataFrame, field: str | pd.Series | None = None
    ) -> pd.DataFrame:
        if isinstance(texts, pd.DataFrame):  # a ROW argument: embed the named field
            texts = row_field(texts, field, "text_to_vector")
        rows = self._guard.batch(list(texts), self._embed, _internal_error_row)
        failed = sum(r[2] is not None for r in rows)
        self._rows.inc(len(rows) - failed)
        self._failed.inc(failed)
        return pd.DataFrame(rows, columns=_COLUMNS)

    def close(self) -> None:
        self._fn.close()


def _internal_error_row(_: object, exc: Exception) -> tuple[None, None, str, None]:
    return (None, None, f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(exc)}", None)


text_to_vector = udf(_TextToVector(), result_type=EMBEDDING_ROW, func_type="pandas")
