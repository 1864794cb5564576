"""Topic-shift event streams with known change points, for evaluating drift detectors.

A stream is a sequence of (event time, document) pairs drawn from a labelled corpus
(AG News via :func:`flinkai.datasets.load_ag_news` in the benchmark, synthetic
labels in tests); events refer to corpus rows by index. Before the change, documents
come from one class mix (default World + Sports); after it, from another (default
Sci/Tech). The change offset is the ground truth a detector is scored against.

Shift types:

* ``abrupt``: the mix switches at one instant, ``change_start_s == change_end_s``.
* ``gradual``: the probability of drawing from the new mix ramps linearly from 0
  at ``change_start_s`` to 1 at ``change_end_s = change_start_s + ramp_s``.
* ``none``: the control, the first mix for the whole duration; a detector should
  stay silent on it.

Arrivals are a non-homogeneous Poisson process whose rate swings slowly (10-minute
sine) between ``rate_min_per_s`` and ``rate_max_per_s``, so sampling periods hold
varying numbers of events, as on a real topic. The change offset is drawn uniformly
from ``change_range_s`` per seed, so it does not line up with any detector's period
grid (an aligned change point would flatter period-based detectors).

Documents are sampled **with replacement**: AG News' test split has ~950 articles
per class, fewer than a 30-minute stream at 1-3 events/s needs. A repeated article
is a realistic event (re-posts, syndication) and does not help a detector, which
sees only the distribution of distances.

Everything is deterministic given ``StreamSpec.seed`` (numpy ``PCG64``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

__all__ = [
    "AG_NEWS_CLASSES",
    "DriftStream",
    "ShiftType",
    "StreamSpec",
    "build_stream",
    "build_streams",
]

ShiftType = Literal["abrupt", "gradual", "none"]

#: AG News class ids (the ``class`` column) and their names.
AG_NEWS_CLASSES: dict[int, str] = {1: "World", 2: "Sports", 3: "Business", 4: "Sci/Tech"}

_RATE_PERIOD_S = 600.0


@dataclass(frozen=True)
class StreamSpec:
    """How to build one stream.

    Attributes:
        shift: ``abrupt``, ``gradual`` or ``none``.
        seed: Seed of everything random in the stream (times, offset, documents).
        duration_s: Event-time length of the stream.
        rate_min_per_s: Lowest arrival rate of the slow rate swing.
        rate_max_per_s: Highest arrival rate.
        before: ``(class, weight)`` pairs of the mix before the change.
        after: ``(class, weight)`` pairs of the mix after the change.
        change_range_s: The change offset is drawn uniformly from this range.
        ramp_s: Length of the linear ramp of a ``gradual`` shift.
    """

    shift: ShiftType
    seed: int = 0
    duration_s: float = 1800.0
    rate_min_per_s: float = 1.0
    rate_max_per_s: float = 3.0
    before: tuple[tuple[int, float], ...] = ((1, 0.5), (2, 0.5))
    after: tuple[tuple[int, float], ...] = ((4, 1.0),)
    change_range_s: tuple[float, float] = (600.0, 1200.0)
    ramp_s: float = 300.0

    def __post_init__(self) -> None:
        if self.shift not in ("abrupt", "gradual", "none"):
            raise ValueError(f"unknown shift type {self.shift!r}")
        if not 0 < self.rate_min_per_s <= self.rate_max_per_s:
            raise ValueError("need 0 < rate_min_per_s <= rate_max_per_s")
        lo, hi = self.change_range_s
        if not 0 <= lo <= hi:
            raise ValueError(f"bad change_range_s {self.change_range_s}")
        end = hi + (self.ramp_s if self.shift == "gradual" else 0.0)
        if self.shift != "none" and end > self.duration_s:
            raise ValueError(f"the change (ending up to {end} s) does not fit in duration_s")
        if self.ramp_s <= 0:
            raise ValueError("ramp_s must be > 0")


@dataclass(frozen=True)
class DriftStream:
    """One built stream plus its ground truth.

    Attributes:
        spec: What it was built from.
        event_time_s: Event times in seconds from the stream start, ascending.
        doc_index: Row of the corpus each event carries.
        labels: Class of each event's document.
        from_after: Whether each event was drawn from the ``after`` mix.
        change_start_s: Ground-truth change point; ``None`` for the control.
        change_end_s: End of the transition (equal to the start when abrupt).
    """

    spec: StreamSpec
    event_time_s: np.ndarray
    doc_index: np.ndarray
    labels: np.ndarray
    from_after: np.ndarray
    change_start_s: float | None
    change_end_s: float | None

    @property
    def name(self) -> str:
        """``<shift>/seed<k>``."""
        return f"{self.spec.shift}/seed{self.spec.seed}"

    def __len__(self) -> int:
        return int(self.event_time_s.shape[0])


def _arrival_times(rng: np.random.Generator, spec: StreamSpec) -> np.ndarray:
    """Non-homogeneous Poisson arrivals by thinning a max-rate process."""
    lam_max = spec.rate_max_per_s
    # Draw enough candidates in one go: mean + 10 sd covers the tail.
    mean = lam_max * spec.duration_s
    n = int(mean + 10 * np.sqrt(mean) + 10)
    candidates = np.cumsum(rng.exponential(1.0 / lam_max, size=n))
    candidates = candidates[candidates < spec.duration_s]
    phase = rng.uniform(0.0, 2 * np.pi)
    mid = (spec.rate_min_per_s + spec.rate_max_per_s) / 2
    amp = (spec.rate_max_per_s - spec.rate_min_per_s) / 2
    rate = mid + amp * np.sin(2 * np.pi * candidates / _RATE_PERIOD_S + phase)
    keep = rng.uniform(0.0, lam_max, size=candidates.shape[0]) < rate
    return candidates[keep]


def _draw_docs(
    rng: np.random.Generator,
    pools: dict[int, np.ndarray],
    mix: tuple[tuple[int, float], ...],
    n: int,
) -> tuple[np.ndarray, np.ndarray]:
    classes = np.array([c for c, _ in mix], dtype=np.int64)
    weights = np.array([w for _, w in mix], dtype=np.float64)
    weights = weights / weights.sum()
    chosen = rng.choice(classes, size=n, p=weights)
    docs = np.empty(n, dtype=np.int64)
    for c in classes:
        mask = chosen == c
        docs[mask] = rng.choice(pools[int(c)], size=int(mask.sum()), replace=True)
    return docs, chosen


def build_stream(labels: np.ndarray | Sequence[int], spec: StreamSpec) -> DriftStream:
    """Build one stream from a labelled corpus.

    Args:
        labels: Class of each corpus row; events refer to rows by index.
        spec: Shift type, seed and shape of the stream.

    Returns:
        The stream and its ground truth.

    Raises:
        ValueError: If a class used by the spec has no rows in ``labels``.
    """
    labels = np.asarray(labels, dtype=np.int64)
    pools: dict[int, np.ndarray] = {}
    for cls, _ in (*spec.before, *spec.after):
        rows = np.flatnonzero(labels == cls)
        if rows.size == 0:
            raise ValueError(f"class {cls} has no rows in the corpus")
        pools[cls] = rows

    rng = np.random.default_rng(spec.seed)
    times = _arrival_times(rng, spec)
    # Drawn for every shift type so the control shares the arrival process.
    offset = float(rng.uniform(*spec.change_range_s))

    if spec.shift == "none":
        start: float | None = None
        end: float | None = None
        p_after = np.zeros_like(times)
    elif spec.shift == "abrupt":
        start = end = offset
        p_after = (times >= offset).astype(np.float64)
    else:
        start, end = offset, offset + spec.ramp_s
        p_after = np.clip((times - offset) / spec.ramp_s, 0.0, 1.0)

    from_after = rng.uniform(size=times.shape[0]) < p_after
    docs_before, cls_before = _draw_docs(rng, pools, spec.before, times.shape[0])
    docs_after, cls_after = _draw_docs(rng, pools, spec.after, times.shape[0])
    doc_index = np.where(from_after, docs_after, docs_before)
    event_labels = np.where(from_after, cls_after, cls_before)
    return DriftStream(
        spec=spec,
        event_time_s=times,
        doc_index=doc_index,
        labels=event_labels,
        from_after=from_after,
        change_start_s=start,
        change_end_s=end,
    )


def build_streams(
    labels: np.ndarray | Sequence[int],
    seeds: Iterable[int],
    shifts: Sequence[ShiftType] = ("abrupt", "gradual", "none"),
    base: StreamSpec | None = None,
) -> list[DriftStream]:
    """Build every ``shift`` x ``seed`` combination.

    Args:
        labels: Class of each corpus row.
        seeds: Seeds to build each shift type with.
        shifts: Shift types to build.
        base: Template for every other field; ``shift`` and ``seed`` are replaced.

    Returns:
        Streams ordered by shift type, then seed.
    """
    template = base or StreamSpec(shift="none")
    seed_list = list(seeds)
    return [
        build_stream(labels, replace(template, shift=shift, seed=seed))
        for shift in shifts
        for seed in seed_list
    ]
