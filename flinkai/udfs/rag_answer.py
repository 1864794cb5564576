"""``rag_answer``: an LLM answer from retrieved passages, naming its sources.

    CREATE TEMPORARY FUNCTION rag_answer AS 'rag_answer.rag_answer' LANGUAGE PYTHON;
    SELECT rag_answer(question, retrieve(question, 5)) ...
    SELECT rag_answer(question, passages, '{"max_new_tokens": 16}') ...

``passages`` is ``retrieve``'s ARRAY<ROW<doc_id, chunk_id, score, text>>. The result is
ROW<passages, answer, sources ARRAY<STRING>, cited ARRAY<STRING>, model_version,
prompt_tokens, cached_tokens, ttft_ms, truncated_passages, dropped_passages, error>;
``passages`` echoes the argument, ``sources`` are the chunk ids of the passages put in
the prompt, ``error`` is ``reason: detail`` (see :mod:`flinkai.functions.rag_answer`).

Why the echo: the planner inlines ``retrieve(...)`` into every column that reads it
(``EXPLAIN`` of rag_answer.sql showed 12 copies, each an embedding and an index
search, marking it non-deterministic does not stop it). A job that reads the passages
only from this result runs ``retrieve`` once per question, and the passages it writes
are exactly those the answer was made from. The decoder, tokenizer and prefix store
(``llm`` section) are loaded once per worker in ``open()``, as for ``llm_complete``.
"""

import json
from collections.abc import Sequence

from pyflink.table import DataTypes, Row
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.functions.events import Reason, payload_base64
from flinkai.functions.guard import internal_error_detail
from flinkai.functions.llm import (
    LlmCompleteFunction,
    build_store,
    load_chat_tokenizer,
    load_prompt_model,
)
from flinkai.functions.rag_answer import (
    Passage,
    RagAnswerFunction,
    RagAnswerRow,
    RagPlanner,
    parse_citations,
)
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import row_guard

__all__ = ["IN_BUNDLE_DECODE", "rag_answer", "rag_finish", "rag_prompt"]

#: The runner warns before it submits a job that calls one of these (see udfs/llm.py).
IN_BUNDLE_DECODE = {
    "rag_answer": (
        "decodes each answer inside its bundle, and Flink ends every bundle before a "
        "checkpoint barrier: a burst of questions holds the checkpoint behind the decoder "
        "until it expires and the job restarts. For a stream, build the prompt with "
        "rag_prompt and complete it with APPLY OPERATOR 'flinkai.operators.llm.complete', "
        "as jobs/rag_answer.sql does (docs/llm.md)"
    )
}

HIT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("doc_id", DataTypes.STRING()),
        DataTypes.FIELD("chunk_id", DataTypes.STRING()),
        DataTypes.FIELD("score", DataTypes.DOUBLE()),
        DataTypes.FIELD("text", DataTypes.STRING()),
    ]
)

ANSWER_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("passages", DataTypes.ARRAY(HIT_ROW)),
        DataTypes.FIELD("answer", DataTypes.STRING()),
        DataTypes.FIELD("sources", DataTypes.ARRAY(DataTypes.STRING())),
        DataTypes.FIELD("cited", DataTypes.ARRAY(DataTypes.STRING())),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("prompt_tokens", DataTypes.INT()),
        DataTypes.FIELD("cached_tokens", DataTypes.INT()),
        DataTypes.FIELD("ttft_ms", DataTypes.DOUBLE()),
        DataTypes.FIELD("truncated_passages", DataTypes.INT()),
        DataTypes.FIELD("dropped_passages", DataTypes.INT()),
        DataTypes.FIELD("error", DataTypes.STRING()),
    ]
)

# Positions in retrieve's ROW<doc_id, chunk_id, score, text>.
_CHUNK_ID, _TEXT = 1, 3


def _passages(hits: Sequence[Row] | None) -> list[Passage] | None:
    if hits is None:
        return None
    return [Passage(str(h[_CHUNK_ID]), str(h[_TEXT] or "")) for h in hits if h is not None]


def _row(hits: Sequence[Row] | None, r: RagAnswerRow) -> Row:
    return Row(
        None if hits is None or r.answer is None else list(hits),
        r.answer,
        None if r.sources is None else list(r.sources),
        None if r.cited is None else list(r.cited),
        r.model_version,
        r.prompt_tokens,
        r.cached_tokens,
        r.ttft_ms,
        r.truncated_passages,
        r.dropped_passages,
        r.error,
    )


class _RagAnswer(ScalarFunction):
    """Row at a time: one question is one LLM prefill and decode."""

    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        llm = LlmCompleteFunction(config, load_prompt_model(config), build_store(config))
        self._fn = RagAnswerFunction(llm)
        self._guard = row_guard(function_context, config, "rag_answer")

    def eval(
        self, question: str | None, hits: Sequence[Row] | None, options: str | None = None
    ) -> Row:
        def answer(_: None) -> RagAnswerRow:
            return self._fn(question, _passages(hits), options)

        def failed(_: None, e: Exception) -> RagAnswerRow:
            detail = f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(e)}"
            return RagAnswerRow(None, None, None, None, None, None, None, None, None, detail)

        return _row(hits, self._guard.rows([None], answer, failed)[0])

    def close(self) -> None:
        self._fn.close()

    def is_deterministic(self) -> bool:
        # The job reads several fields of the result; the planner may copy a
        # deterministic call into each of them (one LLM run per field).
        return False


rag_answer = udf(_RagAnswer(), result_type=ANSWER_ROW, deterministic=False)


PROMPT_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("request", DataTypes.STRING()),
        DataTypes.FIELD("answer", DataTypes.STRING()),
        DataTypes.FIELD("passages", DataTypes.ARRAY(HIT_ROW)),
        DataTypes.FIELD("sources", DataTypes.ARRAY(DataTypes.STRING())),
        DataTypes.FIELD("truncated_passages", DataTypes.INT()),
        DataTypes.FIELD("dropped_passages", DataTypes.INT()),
        DataTypes.FIELD("error", DataTypes.STRING()),
    ]
)

FINISH_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("question", DataTypes.STRING()),
        DataTypes.FIELD("passages", DataTypes.ARRAY(HIT_ROW)),
        DataTypes.FIELD("sources", DataTypes.ARRAY(DataTypes.STRING())),
        DataTypes.FIELD("cited", DataTypes.ARRAY(DataTypes.STRING())),
        DataTypes.FIELD("truncated_passages", DataTypes.INT()),
        DataTypes.FIELD("dropped_passages", DataTypes.INT()),
        DataTypes.FIELD("payload_base64", DataTypes.STRING()),
    ]
)


class _RagPrompt(ScalarFunction):
    """The grounded prompt as a request for the LLM operator, or the final answer row.

    ``request`` is ``{"id", "prompt", "meta"}`` JSON; ``meta`` carries the question,
    the passages, the sources and the original record, which the operator passes
    through to ``rag_finish``. When the model is not to be called (no passages, an
    error, an invalid record), ``request`` is NULL and the other fields are the row.
    Only the tokenizer is loaded (to fit the prompt); the decoder runs in the operator.
    """

    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        tokenizer = load_chat_tokenizer(config)
        self._planner = RagPlanner(
            config.llm,
            lambda text: tokenizer.apply_chat_template([{"role": "user", "content": text}]),
        )
        self._guard = row_guard(function_context, config, "rag_prompt")

    def eval(
        self,
        qid: str | None,
        question: str | None,
        hits: Sequence[Row] | None,
        payload: bytes | None = None,
    ) -> Row:
        def plan(_: None) -> Row:
            got = self._planner.plan(question, _passages(hits))
            if isinstance(got, RagAnswerRow):
                return Row(
                    None,
                    got.answer,
                    None if hits is None or got.answer is None else list(hits),
                    None if got.sources is None else list(got.sources),
                    got.truncated_passages,
                    got.dropped_passages,
                    got.error,
                )
            meta = {
                "question": question,
                "hits": [list(h) for h in hits or () if h is not None],
                "sources": list(got.sources),
                "truncated": got.truncated,
                "dropped": got.dropped,
                "payload_base64": payload_base64(payload) if payload is not None else None,
            }
            request = json.dumps({"id": qid, "prompt": got.text, "meta": meta}, ensure_ascii=False)
            return Row(request, None, None, None, None, None, None)

        def failed(_: None, e: Exception) -> Row:
            detail = f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(e)}"
            return Row(None, None, None, None, None, None, detail)

        return self._guard.rows([None], plan, failed)[0]

    def is_deterministic(self) -> bool:
        return False  # see _RagAnswer: one call per question, not one per field read


class _RagFinish(ScalarFunction):
    """Passages, sources and citations of a completed answer, from the operator's ``meta``."""

    def eval(self, answer: str | None, meta: str | None) -> Row:
        data = json.loads(meta) if meta else {}
        sources = [str(s) for s in data.get("sources") or []]
        hits = [
            Row(h[0], h[1], None if h[2] is None else float(h[2]), h[3])
            for h in data.get("hits") or []
        ]
        return Row(
            data.get("question"),
            hits,
            sources,
            None if answer is None else list(parse_citations(answer, sources)),
            data.get("truncated"),
            data.get("dropped"),
            data.get("payload_base64"),
        )

    def is_deterministic(self) -> bool:
        return False


rag_prompt = udf(_RagPrompt(), result_type=PROMPT_ROW, deterministic=False)
rag_finish = udf(_RagFinish(), result_type=FINISH_ROW, deterministic=False)
