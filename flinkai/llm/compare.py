"""Compare a completion with single-sequence greedy, token by token, and explain a difference.

Batched decoding (padding, chunked prefill, a restored prefix) runs the same math as
one sequence alone, in another order: float sums round differently, by about 1e-6 of
a logit. Where the top two logits are that close, argmax may pick the other token. A
difference is therefore reported with its logit margin under single-sequence greedy;
one counts as a near-tie, not a bug, only when that margin is below :data:`NEAR_TIE`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.llm.generate import Forward

__all__ = ["NEAR_TIE", "Divergence", "first_divergence", "greedy_with_margins"]

#: Largest logit margin at which a flipped argmax is a near-tie.
NEAR_TIE = 1e-4


@dataclass(frozen=True)
class Divergence:
    """Where two completions of one prompt part, and by how much greedy preferred its token.

    Attributes:
        position: Index of the first differing generated token.
        want: Single-sequence greedy's token there.
        got: The other completion's token there.
        margin: ``logit[want] - logit[got]`` under single-sequence greedy (>= 0).
    """

    position: int
    want: int
    got: int
    margin: float

    @property
    def near_tie(self) -> bool:
        return self.margin < NEAR_TIE


def first_divergence(
    decoder: Forward, prompt_ids: Sequence[int], want: Sequence[int], got: Sequence[int]
) -> Divergence | None:
    """The first position where ``got`` leaves ``want`` (greedy's), with its margin; None if equal.

    A completion that is a strict prefix of the other diverges where it stops; its
    margin is then measured against the token it ended with (or 0 when it is empty).
    """
    if tuple(want) == tuple(got):
        return None
    j = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if j is None:
        j = min(len(want), len(got))
        if j >= len(want) or j >= len(got):
            return Divergence(j, int(want[j]) if j < len(want) else -1,
                              int(got[j]) if j < len(got) else -1, 0.0)  # fmt: skip
    logits, cache = decoder.forward(list(prompt_ids))
    for token in want[:j]:
        logits, cache = decoder.forward([int(token)], cache)
    a, b = int(want[j]), int(got[j])
    return Divergence(j, a, b, float(logits[a] - logits[b]))


def greedy_with_margins(
    decoder: Forward, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int]
) -> tuple[tuple[int, ...], float]:
    """Single-sequence greedy tokens and the smallest top-1 minus top-2 logit gap on the way."""
    stops = frozenset(int(i) for i in stop_ids)
    logits, cache = decoder.forward(list(prompt_ids))
    tokens: list[int] = []
    smallest = float("inf")
    while True:
        top2 = np.partition(logits, -2)[-2:]
        smallest = min(smallest, float(top2[1] - top2[0]))
        tokens.append(int(np.argmax(logits)))
        if tokens[-1] in stops or len(tokens) >= max_new_tokens:
            return tuple(tokens), smallest
        logits, cache = decoder.forward([tokens[-1]], cache)
