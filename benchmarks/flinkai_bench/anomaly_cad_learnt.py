"""Joint leave-one-group-out over the learnt-range CAD's settings.

``flinkai bench anomaly --detectors cad_learnt_operator --cad-learn-points 20,50,150,300
--cad-margins 0,0.25 --cad-rest-periods 10,20,30`` runs
:class:`~flinkai.anomaly.cad_growing.GrowingRangeCad` once per (learn points, margin)
and lets each LOGO fold choose, on the other groups only, among every (learn points,
margin, rest period) x scorer setting at once. The rest period only hides scores, so
each run gives every rest period's scores (:func:`~flinkai.anomaly.cad.rest_masked`,
unit-tested equal to the detector).

Not in the grid: the out-of-range share (Numenta's published 5%) and the history
(set by the 64 KB state budget); both are constants of
:mod:`flinkai.anomaly.cad_growing`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from flinkai.anomaly.cad import rest_masked
from flinkai.anomaly.cad_growing import GrowingRangeCad, GrowingRangeConfig
from flinkai.anomaly.nab import NabSeries
from flinkai_bench.anomaly_variants import format_joint_logo, joint_logo

__all__ = ["NAMES", "format_learnt_logo", "learnt_logo", "learnt_raw"]

NAMES = ("learn_points", "margin", "rest_period")


def learnt_raw(values: Sequence[float], config: GrowingRangeConfig) -> list[float]:
    """The detector's raw score per value (0 while learning), before any rest period."""
    det = GrowingRangeCad(config)
    out: list[float] = []
    for v in values:
        det.update(v)
        out.append(0.0 if math.isnan(det.last_raw) else det.last_raw)
    return out


def learnt_logo(
    data: Mapping[str, NabSeries],
    learn_points: Sequence[int],
    margins: Sequence[float],
    rests: Sequence[int],
    max_contexts: int,
    scorers: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Per scorer, LOGO over every (learn points, margin, rest period, setting); JSON-ready.

    Raises:
        DetectorInputError: A setting the detector refuses (a learn count over the
            history, a negative margin).
    """
    say = progress or (lambda _line: None)
    keys = sorted(data)
    natives: dict[tuple[Any, ...], list[np.ndarray]] = {}
    for lp in learn_points:
        for m in margins:
            t0 = time.perf_counter()
            config = GrowingRangeConfig(learn_points=lp, margin=m, max_contexts=max_contexts)
            raws = [learnt_raw(data[k].values.tolist(), config) for k in keys]
            for r in rests:
                natives[(lp, m, r)] = [np.asarray(rest_masked(raw, r)) for raw in raws]
            say(f"  learnt CAD, learn {lp}, margin {m}: {time.perf_counter() - t0:.0f} s")
    return {
        "learn_points": list(learn_points),
        "margins": list(margins),
        "rest_periods": list(rests),
        "max_contexts": max_contexts,
        "scorers": joint_logo(data, natives, NAMES, scorers),
    }


def format_learnt_logo(result: Mapping[str, Any]) -> list[str]:
    """Markdown lines of :func:`learnt_logo`'s result."""
    title = (
        f"Learnt-range CAD (learn points {result['learn_points']}, margins {result['margins']}, "
        f"rest periods {result['rest_periods']}, {result['max_contexts']} contexts)"
    )
    return format_joint_logo(title, result["scorers"], NAMES)
