"""What the ``rag_answer`` SQL function does, without PyFlink.

It answers a question from the passages ``retrieve`` returned for it. The grounded
prompt numbers the passages ``[1]..[k]`` in retrieval order, each labelled with its
``chunk_id``, and ends with the question::

    Answer the question using only the numbered passages below. ...

    [1] (keep#0) the chess world championship match
    [2] (long#0) the long document is now one short chunk

    Question: who plays in the chess championship?

The prompt then goes through the same path as ``llm_complete``
(:class:`~flinkai.functions.llm.LlmCompleteFunction`: chat template, prefix reuse,
greedy decode). The sources are named by construction: ``sources`` are the chunk ids
of the passages that were put in the prompt, in order. Citations ``[n]`` that the
model wrote are parsed into ``cited`` (only numbers of passages in the prompt), but a
small model cites unreliably, so ``sources`` never depends on them.

Passages are cut so that the templated prompt fits ``llm.max_prompt_tokens`` and
``llm.max_prompt_bytes``: every passage is cut to the same length (the longest that
fits), and when even short passages do not fit, the lowest-ranked are left out.
Both are counted in the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flinkai.config import LlmConfig
from flinkai.functions.events import Reason
from flinkai.functions.llm import LlmCompleteFunction, LlmReason

__all__ = [
    "INSTRUCTION",
    "MIN_PASSAGE_CHARS",
    "NO_PASSAGES_ANSWER",
    "GroundedPrompt",
    "Passage",
    "RagAnswerFunction",
    "RagAnswerRow",
    "RagPlanner",
    "build_prompt",
    "parse_citations",
    "render_prompt",
]

INSTRUCTION = (
    "Answer the question using only the numbered passages below. "
    "Name the passages you use by their number, like [1]."
)
#: The answer when retrieval found nothing: the model is not called, so it cannot
#: make up an answer with no source.
NO_PASSAGES_ANSWER = "No passages were found for this question."
#: A passage cut shorter than this carries too little to be worth its slot; the
#: lowest-ranked passage is left out instead.
MIN_PASSAGE_CHARS = 32
_ELLIPSIS = " ..."
_CITATION = re.compile(r"\[(\d{1,3})\]")


@dataclass(frozen=True)
class Passage:
    """One retrieved passage: its chunk id (``doc_id#n``) and text."""

    chunk_id: str
    text: str


@dataclass(frozen=True)
class GroundedPrompt:
    """The prompt and what went into it.

    Attributes:
        text: The prompt (one user message; the chat template is applied later).
        sources: Chunk ids of the passages in the prompt, in the order numbered.
        truncated: Passages in the prompt that were cut short.
        dropped: Retrieved passages left out of the prompt (the lowest-ranked).
    """

    text: str
    sources: tuple[str, ...]
    truncated: int
    dropped: int


def _one_line(text: str) -> str:
    # A newline inside a passage must not start what looks like another numbered line.
    return " ".join(text.split())


def _cut(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` at a word boundary, marked with `` ...``."""
    if len(text) <= max_chars:
        return text
    head = text[: max(max_chars - len(_ELLIPSIS), 0)]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head + _ELLIPSIS


def render_prompt(question: str, passages: Sequence[Passage]) -> str:
    """The grounded prompt text for these passages, as given (no cutting)."""
    lines = [INSTRUCTION, ""]
    lines += [f"[{i}] ({p.chunk_id}) {p.text}" for i, p in enumerate(passages, 1)]
    lines += ["", f"Question: {_one_line(question)}"]
    return "\n".join(lines)


def build_prompt(
    question: str, passages: Sequence[Passage], fits: Callable[[str], bool]
) -> GroundedPrompt | None:
    """The grounded prompt with as many passages, as long, as ``fits`` allows.

    Tries all passages uncut; then the longest common cut (at least
    :data:`MIN_PASSAGE_CHARS`) that fits, found by bisection; then the same with the
    last passage left out, and so on.

    Args:
        question: The question.
        passages: Retrieved passages, best first.
        fits: Whether a prompt text is within the model's limits.

    Returns:
        The prompt, or None when not even one passage cut to
        :data:`MIN_PASSAGE_CHARS` fits beside the question (or ``passages`` is empty).
    """
    clean = [Passage(p.chunk_id, _one_line(p.text)) for p in passages]
    for n in range(len(clean), 0, -1):
        chosen = clean[:n]
        dropped = len(clean) - n
        sources = tuple(p.chunk_id for p in chosen)
        full = render_prompt(question, chosen)
        if fits(full):
            return GroundedPrompt(full, sources, 0, dropped)
        longest = max(len(p.text) for p in chosen)
        lo, hi = MIN_PASSAGE_CHARS, longest - 1
        best: str | None = None
        best_cut = 0
        while lo <= hi:  # the longest cut that fits (token count grows with the cut)
            mid = (lo + hi) // 2
            text = render_prompt(question, [Passage(p.chunk_id, _cut(p.text, mid)) for p in chosen])
            if fits(text):
                best, best_cut, lo = text, mid, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            truncated = sum(len(p.text) > best_cut for p in chosen)
            return GroundedPrompt(best, sources, truncated, dropped)
    return None


def parse_citations(answer: str, sources: Sequence[str]) -> tuple[str, ...]:
    """Chunk ids of the ``[n]`` the answer cites, first mention first; others ignored."""
    cited: list[str] = []
    for match in _CITATION.finditer(answer):
        n = int(match.group(1))
        if 1 <= n <= len(sources) and sources[n - 1] not in cited:
            cited.append(sources[n - 1])
    return tuple(cited)


@dataclass(frozen=True)
class RagAnswerRow:
    """One ``rag_answer`` result; ``error`` is ``reason: detail`` or None.

    ``sources`` are the chunk ids of the passages in the prompt; ``cited`` those the
    answer names as ``[n]``. Without passages: :data:`NO_PASSAGES_ANSWER`, empty
    sources, ``prompt_tokens`` 0 and no model call (``model_version`` None).
    """

    answer: str | None
    sources: tuple[str, ...] | None
    cited: tuple[str, ...] | None
    model_version: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    ttft_ms: float | None
    truncated_passages: int | None
    dropped_passages: int | None
    error: str | None


_NOTHING = RagAnswerRow(None, None, None, None, None, None, None, None, None, None)
_NO_PASSAGES = RagAnswerRow(NO_PASSAGES_ANSWER, (), (), None, 0, 0, None, 0, 0, None)


class RagPlanner:
    """Turns a question and its passages into a grounded prompt, or into the final row.

    Both ways of answering use it: :class:`RagAnswerFunction` (the SQL function, which
    decodes in its bundle) and the ``rag_prompt`` function of ``jobs/rag_answer.sql``,
    whose prompt goes to the scheduled LLM operator.

    Args:
        limits: The ``llm`` section (``max_prompt_tokens``, ``max_prompt_bytes``).
        prompt_ids: The model's chat-templated token ids of a prompt.
    """

    def __init__(self, limits: LlmConfig, prompt_ids: Callable[[str], Sequence[int]]) -> None:
        self.limits = limits
        self.prompt_ids = prompt_ids

    def fits(self, prompt: str) -> bool:
        """Whether the prompt is within ``llm.max_prompt_bytes`` and ``max_prompt_tokens``."""
        if len(prompt.encode("utf-8", "surrogatepass")) > self.limits.max_prompt_bytes:
            return False
        return len(self.prompt_ids(prompt)) <= self.limits.max_prompt_tokens

    def plan(
        self, question: str | None, passages: Sequence[Passage] | None
    ) -> GroundedPrompt | RagAnswerRow:
        """The prompt to complete, or the row itself when the model is not to be called.

        A NULL question (an invalid record, dead-lettered by its parse) gives an
        all-NULL row without an error; NULL passages (``retrieve`` could not embed
        the question) give an ``inference_failed`` error; no passages give
        :data:`NO_PASSAGES_ANSWER`.
        """
        if question is None:
            return _NOTHING
        if passages is None:
            return _error(Reason.INFERENCE_FAILED.value, "the question could not be embedded")
        if not passages:
            return _NO_PASSAGES
        grounded = build_prompt(question, passages, self.fits)
        if grounded is None:
            return _error(
                LlmReason.PROMPT_TOO_LONG.value,
                f"the question with one passage cut to {MIN_PASSAGE_CHARS} characters is "
                f"over llm.max_prompt_tokens ({self.limits.max_prompt_tokens}) or "
                f"llm.max_prompt_bytes ({self.limits.max_prompt_bytes})",
            )
        return grounded


class RagAnswerFunction:
    """Answers questions from passages through an :class:`LlmCompleteFunction`.

    Args:
        llm: The completion function (its model, prefix cache and ``llm`` limits).
    """

    def __init__(self, llm: LlmCompleteFunction) -> None:
        self.llm = llm
        self.planner = RagPlanner(llm.config.llm, llm.model.prompt_ids)

    def fits(self, prompt: str) -> bool:
        return self.planner.fits(prompt)

    def __call__(
        self, question: str | None, passages: Sequence[Passage] | None, options: str | None = None
    ) -> RagAnswerRow:
        """Answer one question (see :meth:`RagPlanner.plan` for the cases without a model call)."""
        grounded = self.planner.plan(question, passages)
        if isinstance(grounded, RagAnswerRow):
            return grounded
        done = self.llm(grounded.text, options)
        if done.error is not None:
            return _error_text(done.error)
        assert done.completion is not None
        return RagAnswerRow(
            answer=done.completion,
            sources=grounded.sources,
            cited=parse_citations(done.completion, grounded.sources),
            model_version=done.model_version,
            prompt_tokens=done.prompt_tokens,
            cached_tokens=done.cached_tokens,
            ttft_ms=done.ttft_ms,
            truncated_passages=grounded.truncated,
            dropped_passages=grounded.dropped,
            error=None,
        )

    def close(self) -> None:
        self.llm.close()


def _error(reason: str, detail: str) -> RagAnswerRow:
    return _error_text(f"{reason}: {detail}")


def _error_text(error: str) -> RagAnswerRow:
    return RagAnswerRow(None, None, None, None, None, None, None, None, None, error)
