"""``parse_prompt`` and ``llm_complete``: LLM completion as SQL functions.

    CREATE TEMPORARY FUNCTION parse_prompt AS 'llm.parse_prompt' LANGUAGE PYTHON;
    CREATE TEMPORARY FUNCTION llm_complete AS 'llm.llm_complete' LANGUAGE PYTHON;
    SELECT llm_complete(parse_prompt(payload), 'prompt') ...       -- one Python operator
    SELECT llm_complete(prompt_text, '{"max_new_tokens": 8}') ...   -- a plain string

``parse_prompt`` returns ROW<id, prompt, error_reason, error_detail, payload_base64>.
``llm_complete`` returns ROW<completion, model_version, prompt_tokens, cached_tokens,
ttft_ms, error>; ``error`` is ``reason: detail`` for a prompt it refused or could not
complete. The decoder, its tokenizer and the prefix store (``llm.store``) are loaded
once per worker in ``open()``.
"""

import pandas as pd
from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai import metrics
from flinkai.functions.events import Reason, payload_base64
from flinkai.functions.guard import internal_error_detail
from flinkai.functions.llm import (
    CompletionRow,
    LlmCompleteFunction,
    Prompt,
    build_store,
    load_prompt_model,
)
from flinkai.functions.llm import parse_prompt as _parse_prompt
from flinkai.functions.rows import row_field
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import dead_letter_row, internal_error_row, row_guard

__all__ = ["IN_BUNDLE_DECODE", "llm_complete", "parse_prompt"]

#: Functions that decode inside their bundle; the runner warns before it submits a job
#: that calls one.
IN_BUNDLE_DECODE = {
    "llm_complete": (
        "decodes each prompt inside its bundle, and Flink ends every bundle before a "
        "checkpoint barrier: a burst of prompts holds the checkpoint until it expires and "
        "the job restarts. For a stream, use the scheduled operator (APPLY OPERATOR "
        "'flinkai.operators.llm.complete', as jobs/llm_complete.sql does), which keeps "
        "prompts in state and decodes beside the bundles (docs/llm.md)"
    )
}

PROMPT_ROW = dead_letter_row(
    DataTypes.FIELD("id", DataTypes.STRING()),
    DataTypes.FIELD("prompt", DataTypes.STRING()),
)

COMPLETION_ROW = DataTypes.ROW(
    [
        DataTypes.FIELD("completion", DataTypes.STRING()),
        DataTypes.FIELD("model_version", DataTypes.STRING()),
        DataTypes.FIELD("prompt_tokens", DataTypes.INT()),
        DataTypes.FIELD("cached_tokens", DataTypes.INT()),
        DataTypes.FIELD("ttft_ms", DataTypes.DOUBLE()),
        DataTypes.FIELD("error", DataTypes.STRING()),
    ]
)
_COMPLETION_COLUMNS = [f.name for f in COMPLETION_ROW.fields]


class _ParsePrompt(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._max_bytes = config.llm.max_prompt_bytes
        self._guard = row_guard(function_context, config, "parse_prompt")

    def _row(self, payload: bytes | None) -> tuple[object, ...]:
        r = _parse_prompt(payload, self._max_bytes)
        if isinstance(r, Prompt):
            return (r.id, r.prompt, None, None, None)
        return (None, None, r.reason, r.detail, payload_base64(payload))

    def eval(self, payloads: pd.Series) -> pd.DataFrame:
        rows = self._guard.rows(list(payloads), self._row, lambda p, e: internal_error_row(2, e, p))
        return pd.DataFrame(rows, columns=[f.name for f in PROMPT_ROW.fields])


class _LlmComplete(ScalarFunction):
    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        group = metrics.flinkai_group(function_context.get_metric_group())
        self._fn = LlmCompleteFunction(
            config,
            load_prompt_model(config),
            build_store(config),
            count_miss=metrics.labelled_counter(group, metrics.LLM_PREFIX_MISSES, "reason"),
        )
        self._guard = row_guard(function_context, config, "llm_complete")

    def _row(self, item: tuple[object, object]) -> tuple[object, ...]:
        prompt, options = item
        if isinstance(prompt, float):  # pandas' NaN for a NULL in a ROW column
            prompt = None
        r: CompletionRow = self._fn(
            prompt if isinstance(prompt, str) or prompt is None else str(prompt),
            options if isinstance(options, str) else None,
        )
        return (r.completion, r.model_version, r.prompt_tokens, r.cached_tokens, r.ttft_ms, r.error)

    def eval(
        self, prompts: pd.Series | pd.DataFrame, arg: str | pd.Series | None = None
    ) -> pd.DataFrame:
        items: list[tuple[object, object]]
        if isinstance(prompts, pd.DataFrame):  # a ROW argument: complete the named field
            prompts = row_field(prompts, arg, "llm_complete")
            # A row whose parse failed has no prompt: it is not completed, only passed on.
            items = [(p, None) for p in prompts]
            skip = [p is None or (isinstance(p, float) and p != p) for p in prompts]
        else:
            opts: list[object] = list(arg) if isinstance(arg, pd.Series) else [arg] * len(prompts)
            items = list(zip(prompts, opts, strict=True))
            skip = [False] * len(items)
        todo = [it for it, s in zip(items, skip, strict=True) if not s]
        done = iter(
            self._guard.rows(
                todo,
                self._row,
                lambda _, e: (
                    None,
                    None,
                    None,
                    None,
                    None,
                    f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(e)}",
                ),
            )
        )
        rows = [(None,) * 6 if s else next(done) for s in skip]
        frame = pd.DataFrame(rows, columns=_COMPLETION_COLUMNS)
        for name in ("prompt_tokens", "cached_tokens"):
            frame[name] = pd.Series(
                [r[_COMPLETION_COLUMNS.index(name)] for r in rows], dtype=object
            )
        return frame

    def close(self) -> None:
        self._fn.close()


parse_prompt = udf(_ParsePrompt(), result_type=PROMPT_ROW, func_type="pandas")
llm_complete = udf(_LlmComplete(), result_type=COMPLETION_ROW, func_type="pandas")
