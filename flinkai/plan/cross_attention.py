"""Video-frame x text-token cross-attention memory, dense and with a temporal window.

Queries are the tokens of ``frames`` video frames (``tokens_per_frame`` each); keys
are ``text_tokens`` text tokens aligned to the clip's time line (token ``j`` belongs
to frame ``j x frames // text_tokens``, e.g. a transcript). The score tensor is
``heads x (frames x tokens_per_frame) x text_tokens`` elements.

The temporal sliding window (``window`` frames, moved by ``stride``) lets a frame see
only the text of the windows it falls in. Two ways to run it:

- a boolean mask on the dense scores: memory stays dense, only the nonzero (allowed)
  pairs shrink;
- block-sparse: one small score block per window (its frames x its text), so memory
  is the sum of the blocks. Windows overlap when ``stride < window``, so blocks hold
  some pairs twice.

The closed forms assume text tokens spread evenly (``text_tokens`` divisible by
``frames``); :func:`flinkai.plan.measure.measure_cross_attention` builds the real
tensors, so uneven alignments show the formulas' error.
"""

from __future__ import annotations

from dataclasses import dataclass

from flinkai.plan.errors import PlanError

__all__ = ["CrossAttentionPlan", "plan_cross_attention", "window_starts"]


def window_starts(frames: int, window: int, stride: int) -> list[int]:
    """First frame of each window; the last window is moved back to end at the last frame."""
    if frames < 1 or window < 1 or stride < 1:
        raise PlanError(f"need frames, window, stride >= 1; got {frames}, {window}, {stride}")
    if window >= frames:
        return [0]
    starts = list(range(0, frames - window + 1, stride))
    if starts[-1] + window < frames:  # cover the tail
        starts.append(frames - window)
    return starts


@dataclass(frozen=True)
class CrossAttentionPlan:
    """Planned sizes, in elements and bytes (all heads, one clip).

    Attributes:
        dense_elements: Score elements without a window.
        masked_nonzero: Allowed pairs of the windowed mask (dense memory, sparse use).
        block_elements: Elements of the per-window blocks (block-sparse memory).
        windows: Number of windows.
        bytes_per_element: Score element size.
    """

    dense_elements: int
    masked_nonzero: int
    block_elements: int
    windows: int
    bytes_per_element: int

    @property
    def dense_bytes(self) -> int:
        return self.dense_elements * self.bytes_per_element

    @property
    def block_bytes(self) -> int:
        return self.block_elements * self.bytes_per_element


def plan_cross_attention(
    frames: int,
    text_tokens: int,
    *,
    tokens_per_frame: int = 1,
    heads: int = 1,
    window: int = 4,
    stride: int = 2,
    bytes_per_element: int = 4,
) -> CrossAttentionPlan:
    """Closed-form sizes of the cross-attention scores (see the module docstring).

    Raises:
        PlanError: A non-positive size.
    """
    if min(frames, text_tokens, tokens_per_frame, heads, bytes_per_element) < 1:
        raise PlanError("frames, text_tokens, tokens_per_frame, heads, bytes must be >= 1")
    starts = window_starts(frames, window, stride)
    per_frame_text = text_tokens / frames  # even alignment assumed
    width = min(window, frames)
    dense = heads * frames * tokens_per_frame * text_tokens
    block = round(heads * len(starts) * width * tokens_per_frame * width * per_frame_text)
    # Allowed (query frame, key frame) pairs: both inside one window.
    pairs = sum(
        1
        for f in range(frames)
        for g in range(frames)
        if any(s <= f < s + width and s <= g < s + width for s in starts)
    )
    nonzero = round(heads * pairs * tokens_per_frame * per_frame_text)
    return CrossAttentionPlan(dense, nonzero, block, len(starts), bytes_per_element)
