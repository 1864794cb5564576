"""The baseline flinkai is measured against: a general, row-at-a-time UDF that calls
sentence-transformers once per row (what a first PyFlink embedding job usually looks like).

Same signature as ``vectorizer.text_to_vector`` so the same SQL job runs it.
"""

import os

from pyflink.common import Row
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.backends.sentence_transformers import SentenceTransformersBackend
from flinkai.runtime.environment import config_from_function_context

ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("embedding", DataTypes.ARRAY(DataTypes.FLOAT())),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("error", DataTypes.STRING()),
        # text_to_vector's f32 field, which the embed job's sink reads; never set here.
        DataTypes.FIELD("embedding_f32", DataTypes.BYTES()),
    ]
)


class _NaiveEmbed(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._backend = SentenceTransformersBackend(config_from_function_context(function_context))
        self._backend.load()

    def eval(self, text: str | Row | None, field: str | None = None) -> Row:
        if isinstance(text, Row):  # text_to_vector(row, field), as the embed job calls it
            text = text.as_dict().get(field or "")
        if not text:
            return Row(None, self._backend.model_version, "empty_text: blank", None)
        vector = self._backend.infer_batch([text]).outputs[0]
        return Row([float(v) for v in vector], self._backend.model_version, None, None)

    def close(self) -> None:
        self._backend.close()


text_to_vector_naive = udf(_NaiveEmbed(), result_type=ROW)
