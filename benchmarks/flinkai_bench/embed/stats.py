"""Pure arithmetic behind ``flinkai bench embed``: rates, percentiles, pacing, latencies.

No clocks, no I/O: every function takes the measured numbers and returns figures,
so the unit tests check them without timing anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_BURST_S",
    "SteadyRate",
    "batch_steady_rate",
    "cpu_between",
    "cpu_by_kind_between",
    "event_latencies_ms",
    "half_rate",
    "latency_windows",
    "pacing_schedule",
    "percentile_rate",
    "percentile_window",
    "percentiles",
    "span_rate",
    "steady_rate",
    "steady_span",
    "two_run_rate",
]

#: Records written less than this long after the one before belong to the same flush.
DEFAULT_BURST_S = 0.25


def percentiles(values_ms: Sequence[float]) -> tuple[float | None, float | None]:
    """(p50, p99) with numpy's linear interpolation; ``(None, None)`` for no values."""
    if len(values_ms) == 0:
        return None, None
    arr = np.asarray(values_ms, dtype=np.float64)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def steady_span(
    timestamps_s: Iterable[float], burst_s: float = DEFAULT_BURST_S
) -> tuple[float, float, int] | None:
    """``(first, last, records after the first flush)`` of output record times.

    A job writes its first output only after it started, loaded the model and ran
    its first batch; after that, records follow at the rate the job sustains. The
    first flush is the opening run of records each less than ``burst_s`` after the
    one before: a flush of a thousand records can take most of a second to write,
    and none of it is steady work. The records after it are the work done between
    the first output and the last; each later flush counts at the end of the work
    that produced it.

    Returns:
        ``None`` when fewer than two flushes were seen (no honest rate exists).
    """
    ts = np.sort(np.asarray(list(timestamps_s), dtype=np.float64))
    if ts.size < 2:
        return None
    first, last = float(ts[0]), float(ts[-1])
    gaps = np.flatnonzero(np.diff(ts) >= burst_s)
    if gaps.size == 0 or last <= first:
        return None
    after = int(ts.size - (gaps[0] + 1))
    return first, last, after


def span_rate(timestamps_s: Iterable[float], burst_s: float = DEFAULT_BURST_S) -> float | None:
    """Steady-state rate from the times output records appeared, start-up excluded.

    Records written after the first flush divided by the time from the first output
    record to the last (see :func:`steady_span`).

    Args:
        timestamps_s: When each output record was written (any order, seconds).
        burst_s: Records this close to the first one count as its flush.

    Returns:
        Records per second, or ``None`` when fewer than two flushes were seen.
    """
    span = steady_span(timestamps_s, burst_s)
    if span is None:
        return None
    first, last, after = span
    return after / (last - first)


@dataclass(frozen=True)
class SteadyRate:
    """Steady output rate of a bounded run whose subtasks may run side by side.

    Attributes:
        rate: Records per second: the sum of the subtasks' own steady rates.
        window: ``(start, end)`` in which every subtask was past its first flush,
            or ``None`` when they never overlapped (for CPU accounting).
        subtask_rates: Group id -> that subtask's rate.
        subtask_outputs: Group id -> its records.
    """

    rate: float
    window: tuple[float, float] | None
    subtask_rates: dict[int, float]
    subtask_outputs: dict[int, int]


def steady_rate(
    timestamps_s: Sequence[float],
    groups: Sequence[int] | None = None,
    burst_s: float = DEFAULT_BURST_S,
) -> SteadyRate | None:
    """:func:`span_rate` of each group of records (one per parallel subtask), summed.

    With one span over all records, the work of every subtask's first flush but the
    earliest would count as steady output, and a parallel job would look faster
    than it is. Each subtask's own first flush is start-up; its rate is measured
    over its own span, and the subtasks run side by side, so their rates add.
    ``groups=None`` is one subtask.

    Returns:
        ``None`` when any group has fewer than two flushes.
    """
    ids = [0] * len(timestamps_s) if groups is None else groups
    if len(timestamps_s) != len(ids):
        raise ValueError(f"{len(timestamps_s)} timestamps but {len(ids)} group ids")
    by_group: dict[int, list[float]] = {}
    for t, g in zip(timestamps_s, ids, strict=True):
        by_group.setdefault(g, []).append(t)
    spans = {g: steady_span(times, burst_s) for g, times in sorted(by_group.items())}
    known = {g: span for g, span in spans.items() if span is not None}
    if not known or len(known) < len(spans):
        return None
    rates = {g: after / (last - first) for g, (first, last, after) in known.items()}
    start = max(first for first, _, _ in known.values())
    end = min(last for _, last, _ in known.values())
    return SteadyRate(
        rate=sum(rates.values()),
        window=(start, end) if end > start else None,
        subtask_rates=rates,
        subtask_outputs={g: len(times) for g, times in sorted(by_group.items())},
    )


def batch_steady_rate(
    batch_ends_s: Sequence[float], batch_sizes: Sequence[int]
) -> tuple[float, tuple[float, float]] | None:
    """Steady rate of a loop that emits results batch by batch, start-up excluded.

    The loop's counterpart of :func:`steady_span`: the first batch is start-up (its
    call allocates the session's buffers), as a job's first output flush is. The rate
    is the items of every later batch over the time from the end of the first batch
    to the end of the last.

    Returns:
        ``(items per second, (first end, last end))``, or ``None`` with fewer than
        two batches.
    """
    if len(batch_ends_s) != len(batch_sizes):
        raise ValueError(f"{len(batch_ends_s)} batch times but {len(batch_sizes)} sizes")
    if len(batch_ends_s) < 2 or batch_ends_s[-1] <= batch_ends_s[0]:
        return None
    first, last = batch_ends_s[0], batch_ends_s[-1]
    return sum(batch_sizes[1:]) / (last - first), (first, last)


def two_run_rate(small_texts: int, small_s: float, full_texts: int, full_s: float) -> float | None:
    """Marginal rate of two runs of one job: extra texts / extra seconds.

    Returns ``None`` when the larger run was not slower (start-up noise exceeds the work).
    """
    if full_texts <= small_texts or full_s <= small_s:
        return None
    return (full_texts - small_texts) / (full_s - small_s)


def half_rate(max_rate: float | None, fraction: float = 0.5) -> float | None:
    """The paced input rate for the latency run: ``fraction`` of the measured maximum."""
    if max_rate is None or max_rate <= 0 or not 0 < fraction <= 1:
        return None
    return max_rate * fraction


def pacing_schedule(count: int, per_second: float, start_s: float = 0.0) -> list[float]:
    """Send time of each event for a steady rate: event ``i`` at ``start + i / rate``.

    An absolute schedule, so a late send does not shift every later one (no drift).
    """
    if per_second <= 0:
        raise ValueError(f"per_second must be > 0, got {per_second}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return [start_s + i / per_second for i in range(count)]


def event_latencies_ms(
    produced_s: Mapping[str, float], arrived_s: Mapping[str, float]
) -> tuple[list[float], int]:
    """Per-event latency (arrival - production) in ms for every event that arrived.

    Args:
        produced_s: Event id -> when its input record was produced.
        arrived_s: Event id -> when its result was first seen (or written).

    Returns:
        Latencies in ms of the events found in both, in ``produced_s`` order, and the
        number of produced events with no result.
    """
    latencies = [
        (arrived_s[key] - sent) * 1000.0 for key, sent in produced_s.items() if key in arrived_s
    ]
    return latencies, len(produced_s) - len(latencies)


def latency_windows(
    produced_s: Mapping[str, float], arrived_s: Mapping[str, float], window_s: float = 5.0
) -> list[dict[str, float]]:
    """Latency over the run: p50/p99/max per ``window_s`` of send time.

    A queue that grows shows as rising windows; a periodic stall (a checkpoint, a
    GC pause) as single bad windows among good ones. Events without a result are
    counted per window as ``missing``.
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    if not produced_s:
        return []
    start = min(produced_s.values())
    buckets: dict[int, list[float]] = {}
    missing: dict[int, int] = {}
    for key, sent in produced_s.items():
        index = int((sent - start) // window_s)
        buckets.setdefault(index, [])
        if key in arrived_s:
            buckets[index].append((arrived_s[key] - sent) * 1000.0)
        else:
            missing[index] = missing.get(index, 0) + 1
    windows = []
    for index in sorted(buckets):
        values = buckets[index]
        p50, p99 = percentiles(values)
        windows.append(
            {
                "start_s": index * window_s,
                "events": float(len(values)),
                "missing": float(missing.get(index, 0)),
                "p50_ms": p50 if p50 is not None else float("nan"),
                "p99_ms": p99 if p99 is not None else float("nan"),
                "max_ms": max(values) if values else float("nan"),
            }
        )
    return windows


def cpu_between(series: Sequence[tuple[float, float]], t0: float, t1: float) -> float | None:
    """CPU seconds spent between two instants, from samples of a cumulative CPU counter.

    Args:
        series: ``(time, cumulative CPU seconds)`` samples in time order.
        t0, t1: The interval (same clock as the samples); values between samples are
            interpolated linearly.

    Returns:
        CPU seconds in ``[t0, t1]``, or ``None`` when the samples do not cover it.
    """
    if len(series) < 2 or t1 < t0:
        return None
    times = np.asarray([t for t, _ in series], dtype=np.float64)
    cpu = np.asarray([c for _, c in series], dtype=np.float64)
    if t0 < times[0] or t1 > times[-1]:
        return None
    return float(np.interp(t1, times, cpu) - np.interp(t0, times, cpu))


def cpu_by_kind_between(
    series: Sequence[tuple[float, Mapping[str, float]]], t0: float, t1: float
) -> dict[str, float]:
    """CPU seconds per process kind in ``[t0, t1]`` (see :func:`cpu_between`); kinds not covered are left out."""
    kinds = sorted({k for _, by_kind in series for k in by_kind})
    out = {}
    for kind in kinds:
        cpu = cpu_between([(t, by_kind.get(kind, 0.0)) for t, by_kind in series], t0, t1)
        if cpu is not None:
            out[kind] = cpu
    return out


def percentile_window(
    timestamps_s: Iterable[float], lo: float = 0.1, hi: float = 0.9
) -> tuple[float, float, int] | None:
    """``(start, end, records)`` between the ``lo`` and ``hi`` quantiles of record times.

    The middle of a run: start-up and the tail are left out whether or not the output
    came in separate flushes. A job fast enough to write without a pause has one flush
    only, and :func:`steady_span` has no honest rate for it; this window does.

    Returns:
        ``None`` with fewer than 10 records or no time between the quantiles.
    """
    ts = np.sort(np.asarray(list(timestamps_s), dtype=np.float64))
    if ts.size < 10:
        return None
    i, j = round(lo * (ts.size - 1)), round(hi * (ts.size - 1))
    if ts[j] <= ts[i]:
        return None
    return float(ts[i]), float(ts[j]), j - i


def percentile_rate(
    timestamps_s: Iterable[float], lo: float = 0.1, hi: float = 0.9
) -> float | None:
    """Records per second within :func:`percentile_window`."""
    window = percentile_window(timestamps_s, lo, hi)
    return None if window is None else window[2] / (window[1] - window[0])
