"""SQL functions of the live RAG index (``jobs/rag_ingest.sql``, ``jobs/rag_answer.sql``).

CREATE TEMPORARY FUNCTION parse_doc_event AS 'rag.parse_doc_event' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION index_document AS 'rag.index_document' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION parse_question AS 'rag.parse_question' LANGUAGE PYTHON;
CREATE TEMPORARY FUNCTION retrieve AS 'rag.retrieve' LANGUAGE PYTHON;

* ``parse_doc_event(key, payload, record_time)`` validates a raw record of the
  documents topic (a null value with a key is a tombstone): ROW<doc_id, op, version,
  text, error_reason, error_detail, payload_base64>.
* ``index_document(d)`` chunks, embeds and writes one parsed event to the index,
  version-guarded: ROW<outcome, chunks, model_version, error>. Called on the row of
  ``parse_doc_event`` so Flink runs both in one Python operator.
* ``parse_question(payload)`` validates ``{"id", "question"}``: ROW<id, question,
  error_reason, error_detail, payload_base64>.
* ``retrieve(query_text, k)`` returns ARRAY<ROW<doc_id, chunk_id, score, text>>, best
  first; an empty index gives an empty array; NULL when the query cannot be embedded.
"""

from datetime import datetime

import pandas as pd
from pyflink.table import DataTypes, Row
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.doc_events import MAX_DOCUMENT_BYTES, DocEvent, DocOp
from flinkai.functions.doc_events import parse_doc_event as _parse_doc
from flinkai.functions.events import Invalid, payload_base64
from flinkai.functions.questions import Question
from flinkai.functions.questions import parse_question as _parse_question
from flinkai.functions.rag_index import DocumentIndexer, IndexResult
from flinkai.functions.retrieve import Retriever
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["index_document", "parse_doc_event", "parse_question", "retrieve"]

DOC_EVENT_ROW = dead_letter_row(
    DataTypes.FIELD("doc_id", DataTypes.STRING()),
    DataTypes.FIELD("op", DataTypes.STRING()),
    DataTypes.FIELD("version", DataTypes.BIGINT()),
    DataTypes.FIELD("text", DataTypes.STRING()),
)

INDEX_RESULT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("outcome", DataTypes.STRING()),
        DataTypes.FIELD("chunks", DataTypes.INT()),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("error", DataTypes.STRING()),
    ]
)

QUESTION_ROW = dead_letter_row(
    DataTypes.FIELD("id", DataTypes.STRING()),
    DataTypes.FIELD("question", DataTypes.STRING()),
)

HIT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("doc_id", DataTypes.STRING()),
        DataTypes.FIELD("chunk_id", DataTypes.STRING()),
        DataTypes.FIELD("score", DataTypes.DOUBLE()),
        DataTypes.FIELD("text", DataTypes.STRING()),
    ]
)


def _epoch_ms(value: object) -> int | None:
    """A record timestamp as Arrow hands it over (Timestamp, datetime, NaT) -> epoch ms."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp | datetime):
        return int(pd.Timestamp(value).value // 1_000_000)
    return int(value)  # type: ignore[call-overload]


def _doc_row(item: tuple[object, object, object]) -> tuple[object, ...]:
    key, payload, ts = item
    result = _parse_doc(key, payload, _epoch_ms(ts), MAX_DOCUMENT_BYTES)  # type: ignore[arg-type]
    if isinstance(result, DocEvent):
        return (result.doc_id, result.op.value, result.version, result.text, None, None, None)
    assert isinstance(result, Invalid)
    b64 = payload_base64(payload)  # type: ignore[arg-type]
    return (None, None, None, None, result.reason.value, result.detail, b64)


def _doc_internal_error(item: tuple[object, object, object], exc: Exception) -> tuple[object, ...]:
    return internal_error_row(4, exc, item[1])  # type: ignore[arg-type]


class _ParseDocEvent(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._guard = row_guard(function_context, config, "parse_doc_event")

    def eval(self, keys: pd.Series, payloads: pd.Series, times: pd.Series) -> pd.DataFrame:
        items = list(zip(keys, payloads, times, strict=True))
        rows = self._guard.rows(items, _doc_row, _doc_internal_error)
        frame = pd.DataFrame(rows, columns=[f.name for f in DOC_EVENT_ROW.fields])
        # Python ints and None (object dtype): a float column would lose precision.
        frame["version"] = pd.Series([r[2] for r in rows], dtype=object)
        return frame


def _event(row: pd.Series) -> DocEvent | None:
    if row["error_reason"] is not None or row["doc_id"] is None:
        return None
    return DocEvent(str(row["doc_id"]), DocOp(row["op"]), int(row["version"]), row["text"])


def _result_tuple(r: IndexResult) -> tuple[object, ...]:
    return (r.outcome, r.chunks, r.model_version, r.error)


class _IndexDocument(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        guard = row_guard(function_context, config, "index_document")
        self._indexer = DocumentIndexer(config, guard=guard)
        self._indexer.open()

    def eval(self, events: pd.DataFrame) -> pd.DataFrame:
        parsed = [_event(row) for _, row in events.iterrows()]
        rows = [_result_tuple(r) for r in self._indexer.apply(parsed)]
        frame = pd.DataFrame(rows, columns=[f.name for f in INDEX_RESULT_ROW.fields])
        frame["chunks"] = pd.Series([r[1] for r in rows], dtype=object)
        return frame

    def close(self) -> None:
        self._indexer.close()


def _question_row(payload: bytes | None, max_text_bytes: int) -> tuple[object, ...]:
    result = _parse_question(payload, max_text_bytes)
    if isinstance(result, Question):
        return (result.id, result.question, None, None, None)
    assert isinstance(result, Invalid)
    return (None, None, result.reason.value, result.detail, payload_base64(payload))


class _ParseQuestion(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._max_text_bytes = config.embedding.max_text_bytes
        self._guard = row_guard(function_context, config, "parse_question")

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = self._guard.rows(
            list(payloads),
            lambda p: _question_row(p, self._max_text_bytes),
            lambda p, e: internal_error_row(2, e, p),
        )
        return pd.DataFrame(rows, columns=[f.name for f in QUESTION_ROW.fields])


class _Retrieve(ScalarFunction):
    """Row at a time: one query is one model call and one index search."""

    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._retriever = Retriever(config)
        self._retriever.open()

    def eval(self, query_text: str | None, k: int | None) -> list[Row] | None:
        hits = self._retriever(query_text, k)
        if hits is None:
            return None
        return [Row(h.doc_id, h.chunk_id, float(h.score), h.text) for h in hits]

    def close(self) -> None:
        self._retriever.close()

    def is_deterministic(self) -> bool:
        # A live index answers the same query differently as documents change, so
        # the planner must not fold or reuse calls as if the result were fixed.
        return False


parse_doc_event = udf(_ParseDocEvent(), result_type=DOC_EVENT_ROW, func_type="pandas")
index_document = udf(_IndexDocument(), result_type=INDEX_RESULT_ROW, func_type="pandas")
parse_question = udf(_ParseQuestion(), result_type=QUESTION_ROW, func_type="pandas")
retrieve = udf(_Retrieve(), result_type=DataTypes.ARRAY(HIT_ROW))
