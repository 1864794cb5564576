"""The cost of one ``rag_answer`` question: prompt tokens, TTFT and total time.

Outside Flink, the same :class:`~flinkai.functions.rag_answer.RagAnswerFunction` the
SQL function runs, on the exported SmolLM2 decoder. The passages are AG News articles
(the corpus of ``flinkai bench rag``); the question is the start of the first one. For
each ``k`` the question is answered ``repeats`` times with no prefix store (every
prefill cold, as for a question that shares no block with an earlier one), after one
untimed warm-up call. Figures are reported, never asserted; the load average is
recorded because the machine is shared.

    flinkai bench rag-answer --json benchmarks/results/<date>/rag-answer-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from flinkai.config import load_config
from flinkai.functions.llm import LlmCompleteFunction, load_prompt_model
from flinkai.functions.rag_answer import Passage, RagAnswerFunction

__all__ = ["register", "run_rag_answer_cost"]


def run_rag_answer_cost(
    ks: tuple[int, ...] = (2, 5), repeats: int = 3, max_new_tokens: int = 32
) -> dict[str, Any]:
    """Answer one question with the top-``k`` passages for each ``k``; the timings."""
    from flinkai.datasets import load_ag_news

    config = load_config(env={}).with_overrides(
        llm={"store": "none", "max_new_tokens": max_new_tokens}
    )
    articles = [text for _, text in load_ag_news(limit=max(ks))]
    question = " ".join(articles[0].split()[:8]) + "?"
    started = time.monotonic()
    model = load_prompt_model(config)
    load_s = time.monotonic() - started
    fn = RagAnswerFunction(LlmCompleteFunction(config, model, None))
    loadavg_start = os.getloadavg()
    rows = []
    for k in ks:
        passages = [Passage(f"ag{i}#0", text) for i, text in enumerate(articles[:k])]
        fn(question, passages)  # warm-up: ORT allocates its buffers on the first run
        totals, ttfts = [], []
        for _ in range(repeats):
            t0 = time.monotonic()
            r = fn(question, passages)
            totals.append((time.monotonic() - t0) * 1000)
            ttfts.append(float(r.ttft_ms or 0.0))
        rows.append(
            {
                "k": k,
                "prompt_tokens": r.prompt_tokens,
                "new_tokens_max": max_new_tokens,
                "truncated_passages": r.truncated_passages,
                "ttft_ms_median": round(statistics.median(ttfts), 1),
                "total_ms_median": round(statistics.median(totals), 1),
                "answer": r.answer,
                "sources": list(r.sources or ()),
            }
        )
    return {
        "bench": "rag_answer_cost",
        "model_version": model.decoder.model_version,
        "model_load_s": round(load_s, 2),
        "repeats": repeats,
        "question": question,
        "rows": rows,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "loadavg_start": loadavg_start,
        "loadavg_end": os.getloadavg(),
    }


def _handle(args: argparse.Namespace) -> int:
    result = run_rag_answer_cost(repeats=args.repeats, max_new_tokens=args.max_new_tokens)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench rag-answer``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "rag-answer",
        help="cost of one rag_answer question: prompt tokens, TTFT, total (k = 2, 5)",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--repeats", type=int, default=3, help="timed questions per k (3)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per answer (32)")
    parser.set_defaults(handler=_handle)
