"""Sub-batch planning: every row once, in sorted order, bounded by size and padding."""

import numpy as np
import pytest

from flinkai.models.tokens import cut_points


def spans(ends: list[int]) -> list[tuple[int, int]]:
    return list(zip([0, *ends[:-1]], ends, strict=True))


def padded(lengths: np.ndarray, ends: list[int]) -> int:
    return sum((b - a) * int(lengths[a:b].max()) for a, b in spans(ends))


def test_without_a_padding_bound_cuts_by_size_only() -> None:
    lengths = np.array([5, 5, 9, 40, 41, 200, 201])
    assert cut_points(lengths, 3, None) == [3, 6, 7]
    assert cut_points(lengths, 32, None) == [7]
    assert cut_points(np.array([], dtype=np.int64), 32, 0.2) == []


def test_padding_bound_cuts_between_length_groups() -> None:
    lengths = np.array([10, 10, 11, 12, 50, 52, 55, 200])
    ends = cut_points(lengths, 32, 0.2)
    assert ends == [4, 7, 8]
    for a, b in spans(ends):
        part = lengths[a:b]
        assert (b - a) * part.max() <= 1.2 * part.sum()


def test_a_zero_bound_cuts_at_every_length_change() -> None:
    assert cut_points(np.array([3, 3, 4, 4, 4, 9]), 32, 0.0) == [2, 5, 6]


@pytest.mark.parametrize("seed", range(5))
def test_random_batches_cover_every_row_and_respect_both_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = np.sort(rng.integers(8, 256, size=int(rng.integers(1, 300))))
    for batch_size, bound in ((32, 0.2), (8, 0.1), (64, None)):
        ends = cut_points(lengths, batch_size, bound)
        assert ends[-1] == len(lengths) and ends == sorted(set(ends))
        assert all(b - a <= batch_size for a, b in spans(ends))
        if bound is not None:
            for a, b in spans(ends):
                part = lengths[a:b]
                # a single row is never cut further, whatever its padding
                assert b - a == 1 or (b - a) * part.max() <= (1 + bound) * part.sum()
            # never pads more than cutting by size alone
            assert padded(lengths, ends) <= padded(lengths, cut_points(lengths, batch_size, None))
