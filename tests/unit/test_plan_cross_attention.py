"""Cross-attention planner: closed forms, and the real tensors they are checked against."""

from __future__ import annotations

import pytest

from flinkai.plan import PlanError
from flinkai.plan.cross_attention import plan_cross_attention, window_starts


def test_windows_cover_every_frame() -> None:
    assert window_starts(10, 4, 2) == [0, 2, 4, 6]
    assert window_starts(11, 4, 2) == [0, 2, 4, 6, 7]  # the tail window ends at frame 10
    assert window_starts(3, 4, 2) == [0]
    with pytest.raises(PlanError):
        window_starts(0, 4, 2)


def test_dense_and_windowed_sizes_by_hand() -> None:
    # 8 frames, 1 text token per frame, window 4 stride 2: windows at 0, 2, 4
    plan = plan_cross_attention(8, 8, window=4, stride=2)
    assert plan.windows == 3
    assert plan.dense_elements == 64 and plan.dense_bytes == 256
    assert plan.block_elements == 3 * 4 * 4
    # frames f, g see each other when one window holds both: |f - g| <= 3 and same block
    allowed = {(f, g) for s in (0, 2, 4) for f in range(s, s + 4) for g in range(s, s + 4)}
    assert plan.masked_nonzero == len(allowed) == 40


def test_sizes_scale_with_heads_and_frame_tokens() -> None:
    one = plan_cross_attention(16, 64)
    big = plan_cross_attention(16, 64, heads=8, tokens_per_frame=4, bytes_per_element=2)
    assert big.dense_elements == one.dense_elements * 32
    assert big.masked_nonzero == one.masked_nonzero * 32
    assert big.block_bytes == one.block_elements * 32 * 2


@pytest.mark.parametrize(("frames", "text"), [(16, 64), (30, 500)])
def test_plan_matches_allocated_tensors(frames: int, text: int) -> None:
    pytest.importorskip("torch")
    from flinkai.plan.measure import measure_cross_attention

    plan = plan_cross_attention(frames, text, tokens_per_frame=2, heads=2)
    real = measure_cross_attention(frames, text, tokens_per_frame=2, heads=2)
    assert real.windows == plan.windows
    assert real.dense_elements == plan.dense_elements
    assert real.dense_bytes == plan.dense_bytes
    if text % frames == 0:  # even alignment: the closed forms are exact
        assert (real.masked_nonzero, real.block_elements) == (
            plan.masked_nonzero,
            plan.block_elements,
        )
    else:  # uneven: the formulas assume text/frames tokens per frame; off by < 0.1 %
        assert real.masked_nonzero == pytest.approx(plan.masked_nonzero, rel=1e-3)
        assert real.block_elements == pytest.approx(plan.block_elements, rel=1e-3)
