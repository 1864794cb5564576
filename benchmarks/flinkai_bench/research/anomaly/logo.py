"""Leave-one-group-out (LOGO) selection of scorer settings on a NAB corpus.

For one detector and one scorer option there are ``K`` candidate settings, each
giving every file a score series. For each NAB group ``g`` (the held-out fold):

1. each candidate's threshold is optimised over the files of the *other* groups
   (NAB's rule, on those files only) and the candidate with the highest raw
   score there wins (ties: the earlier candidate);
2. the files of ``g`` take the winner's scores.

Labels and scores of a group never choose its own setting. The pooled held-out
scores are then reported two ways:

* ``pooled``: one threshold per profile optimised over all pooled files (NAB's rule
  for a detector's final threshold; the settings were chosen without the group,
  the threshold is not);
* ``strict``: each group scored at the threshold its own fold chose on the other
  groups, so nothing about a group's labels reaches its score (standard profile).

``in_sample`` gives, for comparison, the best candidate chosen on all files at once
(the leaky protocol this replaces) and the first candidate alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.errors import NabDataError
from flinkai.anomaly.nab import LabelledSeries
from flinkai_bench.research.anomaly.nab_score import (
    PROFILES,
    evaluate,
    null_score,
    optimize_threshold,
    perfect_score,
    score_file,
)

__all__ = ["FoldChoice", "group_of", "logo_select"]

FloatArray = npt.NDArray[np.float64]
Items = list[tuple[LabelledSeries, FloatArray]]


def group_of(name: str) -> str:
    """``realTweets/Twitter_volume_AAPL.csv`` -> ``realTweets``."""
    return name.split("/", 1)[0]


@dataclass(frozen=True)
class FoldChoice:
    """What one fold chose on the other groups' files.

    Attributes:
        group: The held-out group.
        candidate: Index of the chosen setting.
        train_raw: Its raw NAB standard score on the other groups.
        threshold: Its threshold there.
    """

    group: str
    candidate: int
    train_raw: float
    threshold: float


def logo_select(
    labels: Sequence[LabelledSeries],
    candidates: Sequence[Sequence[FloatArray]],
) -> dict[str, Any]:
    """LOGO over the groups of ``labels``.

    Args:
        labels: The corpus files.
        candidates: Per candidate setting, one score array per file (same order as
            ``labels``).

    Returns:
        JSON-ready: per fold the choice, the pooled and strict held-out scores, and
        the in-sample reference.

    Raises:
        NabDataError: Fewer than two groups, or no candidate.
    """
    scores = [list(c) for c in candidates]
    if not scores:
        raise NabDataError("no candidate settings")
    groups = sorted({group_of(s.name) for s in labels})
    if len(groups) < 2:
        raise NabDataError(f"leave-one-group-out needs two groups or more, got {groups}")
    std = PROFILES["standard"]
    folds: list[FoldChoice] = []
    for g in groups:
        train = [i for i, s in enumerate(labels) if group_of(s.name) != g]
        best: FoldChoice | None = None
        for k, per_file in enumerate(scores):
            choice = optimize_threshold([(labels[i], per_file[i]) for i in train], std)
            if best is None or choice.score > best.train_raw:
                best = FoldChoice(g, k, choice.score, choice.threshold)
        assert best is not None
        folds.append(best)
    by_group = {f.group: f for f in folds}
    pooled: Items = [
        (s, scores[by_group[group_of(s.name)].candidate][i]) for i, s in enumerate(labels)
    ]
    pooled_scores = {p: round(evaluate(pooled, prof).normalized, 2) for p, prof in PROFILES.items()}
    strict_raw = sum(
        score_file(s, a, by_group[group_of(s.name)].threshold, std).score for s, a in pooled
    )
    null, perfect = null_score(labels, std), perfect_score(labels, std)
    strict = round(100.0 * (strict_raw - null) / (perfect - null), 2)
    in_sample = [
        round(evaluate(list(zip(labels, per_file, strict=True)), std).normalized, 2)
        for per_file in scores
    ]
    return {
        "folds": [
            {
                "held_out": f.group,
                "candidate": f.candidate,
                "threshold": f.threshold,
                "train_raw": round(f.train_raw, 4),
            }
            for f in folds
        ],
        "pooled": pooled_scores,
        "strict_standard": strict,
        "in_sample_best_standard": max(in_sample),
        "in_sample_best_candidate": int(np.argmax(in_sample)),
        "in_sample_first_standard": in_sample[0],
    }
