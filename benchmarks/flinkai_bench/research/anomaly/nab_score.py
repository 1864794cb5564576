"""Numenta Anomaly Benchmark (NAB) scoring, plus window-based precision, recall and F1.

The series, windows and probationary period it scores come from
:mod:`flinkai.anomaly.nab` (the product's loader).

The rules follow Lavin & Ahmad, "Evaluating Real-time Anomaly Detection Algorithms -
the Numenta Anomaly Benchmark" (2015) and the NAB documentation:

* Each series carries labelled anomaly *windows* (row ranges, both ends included).
* The first ``min(floor(0.15 * n), 0.15 * 5000)`` rows of a series are a probationary
  period: detections there are ignored, and a window with no row after it is ignored.
* A detection is a row whose anomaly score is ``>= threshold``.
* Scaled sigmoid ``sigma(y) = 2 / (1 + exp(5 * y)) - 1`` (``-1`` for ``y > 3``), where
  ``y`` is a position relative to a window's right edge.
* Inside a window of ``w`` rows ending at row ``r``, a detection at row ``i`` sits at
  ``y = -(r - i + 1) / w`` (``-1`` at the left edge, ``-1/w`` at the right edge) and is
  worth ``A_TP * sigma(y) / sigma(-1)``: exactly ``A_TP`` at the left edge, less later.
  Only the best (earliest) detection of a window counts.
* A window with no detection costs ``-A_FN``.
* A detection outside every window is a false positive worth ``A_FP * sigma(y)`` with
  ``y = (i - r) / (w - 1)`` measured from the preceding window (right edge ``r``, ``w``
  rows), so a detection just after a window costs little and one far after it costs
  ``A_FP``; with no preceding window it costs ``A_FP`` (``sigma = -1``).
* A file's raw score is the sum of its window and false-positive terms; a detector's
  raw score is the sum over files at one threshold, chosen per detector and profile to
  maximise that sum over the whole corpus.
* Normalised score ``100 * (raw - null) / (perfect - null)``: ``null`` is the raw score
  of a detector that never fires (``-A_FN`` per counted window) and ``perfect`` is
  ``A_TP`` times the number of labelled windows.

Event-level metrics (:func:`event_metrics`) use the same windows and probationary rows:
a window is a true positive if at least one detection falls inside it (several count
once), a counted window without a detection is a false negative, and every detection
row outside all windows is one false positive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.errors import NabDataError
from flinkai.anomaly.nab import PROBATION_PERCENT, LabelledSeries, probationary_length

__all__ = [
    "PROFILES",
    "CorpusScore",
    "CostProfile",
    "EventMetrics",
    "FileScore",
    "ProfileResult",
    "RowWeights",
    "ThresholdChoice",
    "evaluate",
    "event_metrics",
    "event_metrics_corpus",
    "normalized_score",
    "null_score",
    "optimize_threshold",
    "perfect_score",
    "row_weights",
    "scaled_sigmoid",
    "score_corpus",
    "score_file",
]

FloatArray = npt.NDArray[np.float64]
# Above this relative distance the sigmoid is clamped to -1 (a plain false positive).
_FAR_POSITION = 3.0


ScoresLike = Sequence[float] | npt.NDArray[np.floating]


@dataclass(frozen=True)
class CostProfile:
    """Weights of one NAB application profile.

    Attributes:
        name: Profile name as NAB spells it.
        tp_weight: ``A_TP``, value of a detection at a window's left edge.
        fp_weight: ``A_FP``, cost of a false positive far from any window.
        fn_weight: ``A_FN``, cost of a window without a detection.
    """

    name: str
    tp_weight: float
    fp_weight: float
    fn_weight: float


# Published weights (NAB config/profiles.json; Lavin & Ahmad 2015, table 1).
PROFILES: Mapping[str, CostProfile] = {
    "standard": CostProfile("standard", tp_weight=1.0, fp_weight=0.11, fn_weight=1.0),
    "reward_low_FP_rate": CostProfile(
        "reward_low_FP_rate", tp_weight=1.0, fp_weight=0.22, fn_weight=1.0
    ),
    "reward_low_FN_rate": CostProfile(
        "reward_low_FN_rate", tp_weight=1.0, fp_weight=0.11, fn_weight=2.0
    ),
}


@dataclass(frozen=True)
class RowWeights:
    """Per-row NAB values of one series under one profile.

    Attributes:
        window_id: Index of the window holding each row, ``-1`` outside windows.
        weight: Score a detection at each row would add (TP value inside a window,
            signed FP cost outside).
        scorable: False for probationary rows.
        counted: For each window, whether it has a scorable row (and so can be missed).
    """

    window_id: npt.NDArray[np.int64]
    weight: FloatArray
    scorable: npt.NDArray[np.bool_]
    counted: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FileScore:
    """NAB score of one series at one threshold.

    ``tp``/``fp``/``fn``/``tn`` count scorable *rows* (as in NAB's score tables);
    ``total`` is the series length including probationary rows.
    """

    name: str
    threshold: float
    score: float
    tp: int
    tn: int
    fp: int
    fn: int
    total: int


@dataclass(frozen=True)
class CorpusScore:
    """Scores of every series at one threshold and their sum."""

    threshold: float
    files: tuple[FileScore, ...]

    @property
    def score(self) -> float:
        """Raw corpus score: the sum of file scores."""
        return float(sum(f.score for f in self.files))


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold that maximises a raw corpus score, and that score."""

    threshold: float
    score: float


@dataclass(frozen=True)
class ProfileResult:
    """A detector's NAB result under one profile.

    Attributes:
        profile: Profile name.
        threshold: Optimised threshold.
        raw: Raw corpus score at that threshold.
        null: Raw score of a detector that never fires.
        perfect: Raw score of a perfect detector.
        normalized: ``100 * (raw - null) / (perfect - null)``.
        files: Per-series scores at the threshold.
    """

    profile: str
    threshold: float
    raw: float
    null: float
    perfect: float
    normalized: float
    files: tuple[FileScore, ...]


@dataclass(frozen=True)
class EventMetrics:
    """Window-level detection counts and the ratios derived from them.

    Attributes:
        tp: Windows with at least one detection.
        fn: Windows without a detection.
        fp: Detection rows outside every window.
    """

    tp: int
    fn: int
    fp: int

    @property
    def precision(self) -> float:
        """``tp / (tp + fp)``, 0.0 when there is no detection."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float:
        """``tp / (tp + fn)``, 0.0 when there is no window."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall, 0.0 when both are 0."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    def __add__(self, other: EventMetrics) -> EventMetrics:
        return EventMetrics(self.tp + other.tp, self.fn + other.fn, self.fp + other.fp)


def _ratio(num: int, den: int) -> float:
    return num / den if den > 0 else 0.0


def scaled_sigmoid(position: float | FloatArray) -> FloatArray:
    """NAB's scaled sigmoid: ``2 / (1 + exp(5 * y)) - 1``, and ``-1`` beyond ``y = 3``.

    Args:
        position: Relative position ``y`` to a window's right edge (negative inside).

    Returns:
        Values in ``[-1, 1)``, same shape as ``position``.
    """
    y = np.asarray(position, dtype=np.float64)
    # Clipping only avoids overflow in exp; clipped values are replaced by -1 anyway.
    value = 2.0 / (1.0 + np.exp(5.0 * np.minimum(y, _FAR_POSITION + 1.0))) - 1.0
    return np.where(y > _FAR_POSITION, -1.0, value)


def row_weights(
    series: LabelledSeries,
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
) -> RowWeights:
    """Per-row value of a detection for one series under one profile.

    Args:
        series: The labelled series.
        profile: Cost weights.
        probation_percent: Probationary fraction (0 scores every row).

    Returns:
        The per-row window ids, weights and scorable mask, and counted windows.
    """
    n = series.n_rows
    rows = np.arange(n)
    window_id = np.full(n, -1, dtype=np.int64)
    # Before the first window a false positive is "far from any window".
    weight = np.full(n, -profile.fp_weight, dtype=np.float64)
    max_tp = float(scaled_sigmoid(-1.0))
    for k, w in enumerate(series.windows):
        inside = rows[w.start : w.end + 1]
        window_id[w.start : w.end + 1] = k
        position = -(w.end - inside + 1) / w.width
        weight[w.start : w.end + 1] = profile.tp_weight * scaled_sigmoid(position) / max_tp
        stop = series.windows[k + 1].start if k + 1 < len(series.windows) else n
        after = rows[w.end + 1 : stop]
        # A one-row window has no spread to scale by; treat its width as one row.
        spread = max(w.width - 1, 1)
        weight[w.end + 1 : stop] = profile.fp_weight * scaled_sigmoid((after - w.end) / spread)
    first_scored = probationary_length(n, probation_percent)
    counted = np.array([w.end >= first_scored for w in series.windows], dtype=bool)
    return RowWeights(window_id, weight, rows >= first_scored, counted)


def _as_scores(series: LabelledSeries, anomaly_scores: ScoresLike) -> FloatArray:
    scores = np.asarray(anomaly_scores, dtype=np.float64)
    if scores.shape != (series.n_rows,):
        raise NabDataError(
            f"{series.name}: {scores.shape[0] if scores.ndim else 0} anomaly scores "
            f"for {series.n_rows} rows"
        )
    return scores


def score_file(
    series: LabelledSeries,
    anomaly_scores: ScoresLike,
    threshold: float,
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
) -> FileScore:
    """Raw NAB score of one series at one threshold.

    Args:
        series: The labelled series.
        anomaly_scores: One score per row; a row is a detection when ``>= threshold``
            (NaN never is).
        threshold: Detection threshold.
        profile: Cost weights.
        probation_percent: Probationary fraction.

    Returns:
        The file score with NAB's row counts.
    """
    scores = _as_scores(series, anomaly_scores)
    rw = row_weights(series, profile, probation_percent)
    detected = rw.scorable & (scores >= threshold)
    in_window = rw.window_id >= 0
    fp_rows = detected & ~in_window
    tp_rows = detected & in_window
    best = np.full(len(series.windows), -profile.fn_weight)
    np.maximum.at(best, rw.window_id[tp_rows], rw.weight[tp_rows])
    score = float(best[rw.counted].sum() + rw.weight[fp_rows].sum())
    scored_window_rows = int((rw.scorable & in_window).sum())
    scored_other_rows = int((rw.scorable & ~in_window).sum())
    tp, fp = int(tp_rows.sum()), int(fp_rows.sum())
    return FileScore(
        name=series.name,
        threshold=threshold,
        score=score,
        tp=tp,
        tn=scored_other_rows - fp,
        fp=fp,
        fn=scored_window_rows - tp,
        total=series.n_rows,
    )


def score_corpus(
    items: Iterable[tuple[LabelledSeries, ScoresLike]],
    threshold: float,
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
) -> CorpusScore:
    """Score every series at one threshold.

    Args:
        items: ``(series, anomaly scores)`` pairs.
        threshold: Detection threshold shared by all series.
        profile: Cost weights.
        probation_percent: Probationary fraction.

    Returns:
        Per-file scores and their sum.
    """
    files = tuple(score_file(s, a, threshold, profile, probation_percent) for s, a in items)
    return CorpusScore(threshold, files)


def _sweep_parts(
    items: Iterable[tuple[LabelledSeries, ScoresLike]],
    profile: CostProfile,
    probation_percent: float,
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.int64], float]:
    """Scorable rows of the whole corpus: scores, weights, global window ids, base score."""
    scores, weights, wids = [], [], []
    base, offset = 0.0, 0
    for series, anomaly_scores in items:
        s = _as_scores(series, anomaly_scores)
        rw = row_weights(series, profile, probation_percent)
        # Windows with no scorable row still get ids, but never a row, so never a delta.
        keep = rw.scorable & ~np.isnan(s)
        scores.append(s[keep])
        weights.append(rw.weight[keep])
        wid = rw.window_id[keep]
        wids.append(np.where(wid >= 0, wid + offset, -1))
        offset += len(series.windows)
        base -= profile.fn_weight * int(rw.counted.sum())
    return (
        np.concatenate(scores) if scores else np.empty(0),
        np.concatenate(weights) if weights else np.empty(0),
        np.concatenate(wids) if wids else np.empty(0, dtype=np.int64),
        base,
    )


def _score_deltas(weights: FloatArray, wids: npt.NDArray[np.int64], fn_weight: float) -> FloatArray:
    """Gain from adding each row, in order, to the detections made so far.

    A false-positive row adds its (negative) weight; a window row adds how much it
    raises the best value of its window, starting from the missed-window cost.
    """
    delta = np.where(wids < 0, weights, 0.0)
    best: dict[int, float] = {}
    for i in np.flatnonzero(wids >= 0):
        k = int(wids[i])
        old = best.get(k, -fn_weight)
        if weights[i] > old:
            best[k] = float(weights[i])
            delta[i] = weights[i] - old
    return delta


def optimize_threshold(
    items: Iterable[tuple[LabelledSeries, ScoresLike]],
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
) -> ThresholdChoice:
    """Find the threshold that maximises the raw score summed over all series.

    Every distinct anomaly score of a scorable row is a candidate, plus one above
    them all (no detection: 1.1 for scores in [0, 1], as NAB uses). On ties the
    highest threshold wins.

    Args:
        items: ``(series, anomaly scores)`` pairs of one detector over the corpus.
        profile: Cost weights.
        probation_percent: Probationary fraction.

    Returns:
        The best threshold and the raw corpus score it gives.
    """
    scores, weights, wids, base = _sweep_parts(items, profile, probation_percent)
    if len(scores) == 0:
        return ThresholdChoice(1.1, base)
    order = np.argsort(-scores, kind="stable")
    scores, weights, wids = scores[order], weights[order], wids[order]
    running = base + np.cumsum(_score_deltas(weights, wids, profile.fn_weight))
    # The score at threshold t includes every row with score >= t: the last row of
    # each run of equal scores closes that candidate.
    last_of_run = np.flatnonzero(np.append(scores[1:] != scores[:-1], True))
    top = max(1.1, float(np.nextafter(scores[0], np.inf)))
    thresholds = np.concatenate([[top], scores[last_of_run]])
    totals = np.concatenate([[base], running[last_of_run]])
    best = int(np.argmax(totals))
    return ThresholdChoice(float(thresholds[best]), float(totals[best]))


def null_score(
    series: Iterable[LabelledSeries],
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
) -> float:
    """Raw score of a detector that never fires: ``-A_FN`` per counted window."""
    missed = sum(int(row_weights(s, profile, probation_percent).counted.sum()) for s in series)
    return -profile.fn_weight * missed


def perfect_score(series: Iterable[LabelledSeries], profile: CostProfile) -> float:
    """Raw score of a perfect detector: ``A_TP`` per labelled window."""
    return profile.tp_weight * sum(len(s.windows) for s in series)


def normalized_score(raw: float, null: float, perfect: float) -> float:
    """``100 * (raw - null) / (perfect - null)``: 0 for the null detector, 100 for perfect.

    Raises:
        NabDataError: If ``perfect == null`` (a corpus without windows).
    """
    if perfect == null:
        raise NabDataError("cannot normalise: the corpus has no scored window")
    return 100.0 * (raw - null) / (perfect - null)


def evaluate(
    items: Sequence[tuple[LabelledSeries, ScoresLike]],
    profile: CostProfile,
    probation_percent: float = PROBATION_PERCENT,
    threshold: float | None = None,
) -> ProfileResult:
    """Full NAB evaluation of one detector under one profile.

    Args:
        items: ``(series, anomaly scores)`` pairs over the corpus.
        profile: Cost weights.
        probation_percent: Probationary fraction.
        threshold: Use this threshold instead of optimising one.

    Returns:
        Threshold, raw, null, perfect and normalised scores, and per-file scores.
    """
    if threshold is None:
        threshold = optimize_threshold(items, profile, probation_percent).threshold
    corpus = score_corpus(items, threshold, profile, probation_percent)
    labels = [s for s, _ in items]
    null = null_score(labels, profile, probation_percent)
    perfect = perfect_score(labels, profile)
    return ProfileResult(
        profile=profile.name,
        threshold=threshold,
        raw=corpus.score,
        null=null,
        perfect=perfect,
        normalized=normalized_score(corpus.score, null, perfect),
        files=corpus.files,
    )


def event_metrics(
    series: LabelledSeries,
    anomaly_scores: ScoresLike,
    threshold: float,
    probation_percent: float = PROBATION_PERCENT,
) -> EventMetrics:
    """Window-level TP/FN/FP of one series (see the module docstring).

    Args:
        series: The labelled series.
        anomaly_scores: One score per row; ``>= threshold`` is a detection.
        threshold: Detection threshold.
        probation_percent: Probationary fraction; 0 counts every row and window.

    Returns:
        Window and detection counts with precision, recall and F1.
    """
    scores = _as_scores(series, anomaly_scores)
    first_scored = probationary_length(series.n_rows, probation_percent)
    detected = np.flatnonzero(scores >= threshold)
    detected = detected[detected >= first_scored]
    tp = fn = 0
    in_any = np.zeros(len(detected), dtype=bool)
    for w in series.windows:
        if w.end < first_scored:
            continue
        hits = (detected >= w.start) & (detected <= w.end)
        in_any |= hits
        tp, fn = (tp + 1, fn) if hits.any() else (tp, fn + 1)
    return EventMetrics(tp=tp, fn=fn, fp=int((~in_any).sum()))


def event_metrics_corpus(
    items: Iterable[tuple[LabelledSeries, ScoresLike]],
    threshold: float,
    probation_percent: float = PROBATION_PERCENT,
) -> EventMetrics:
    """Window-level counts summed over series (micro-averaged ratios)."""
    total = EventMetrics(0, 0, 0)
    for series, scores in items:
        total = total + event_metrics(series, scores, threshold, probation_percent)
    return total
