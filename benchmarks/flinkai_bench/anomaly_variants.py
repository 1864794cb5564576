"""Joint leave-one-group-out over z-score variants and scorer settings.

``flinkai bench anomaly --zscore-windows 100,300,1000,2000 --zscore-inputs value,diff``
runs Beam's z-score once per (window, input) and then lets each LOGO fold choose,
on the other groups only, among every variant x scorer setting at once. The
pooled held-out score is the honest figure for "the z-score, tuned": the window and
the input are chosen the way the scorer's settings are, never on the group scored.

Inputs:

* ``value``: the series itself (the operator's ``model = 'zscore'``);
* ``diff``: the change from the previous value (the first point scores NaN), which
  turns a level shift into one spike instead of a long run of high scores.

Each variant is also reported in-sample at its best setting (leaky, for
comparison), so a reader sees how much the choice itself is worth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flinkai.anomaly.nab import NabSeries
from flinkai.anomaly.zscore import ZScore
from flinkai_bench.research.anomaly.logo import logo_select
from flinkai_bench.research.anomaly.scorers import SETTINGS, apply_scorer

__all__ = [
    "INPUTS",
    "format_joint_logo",
    "format_variant_logo",
    "joint_logo",
    "run_variant",
    "variant_logo",
]

INPUTS = ("value", "diff")


def run_variant(series: NabSeries, window: int, source: str) -> np.ndarray:
    """Beam's z-score (scored, then learnt) of ``series`` at ``window`` on ``source``.

    Returns:
        The unbounded z-score per point; NaN where the detector has too little data.

    Raises:
        ValueError: An unknown input.
    """
    if source not in INPUTS:
        raise ValueError(f"unknown z-score input {source!r}; expected one of {INPUTS}")
    det = ZScore(window)
    out = np.full(len(series.values), np.nan)
    prev: float | None = None
    for i, v in enumerate(series.values.tolist()):
        if source == "diff":
            x, prev = (math.nan if prev is None else v - prev), v
            if math.isnan(x):
                continue
        else:
            x = v
        out[i] = det.score_one(x)
        det.learn_one(x)
    return out


def joint_logo(
    data: Mapping[str, NabSeries],
    natives: Mapping[tuple[Any, ...], Sequence[np.ndarray]],
    names: Sequence[str],
    scorers: Sequence[str],
) -> dict[str, Any]:
    """Per scorer, LOGO over every (variant, scorer setting).

    Args:
        natives: Per variant (a tuple of values named by ``names``), one native
            output per file in sorted key order.
    """
    keys = sorted(data)
    labels = [data[k].labels for k in keys]
    out: dict[str, Any] = {}
    for scorer in scorers:
        settings: list[dict[str, Any]] = []
        candidates = []
        for variant, per_file in natives.items():
            for st in SETTINGS[scorer]:
                settings.append({**dict(zip(names, variant, strict=True)), **st})
                candidates.append([
                    apply_scorer(scorer, n, data[k].values, st)
                    for n, k in zip(per_file, keys, strict=True)
                ])  # fmt: skip
        result = logo_select(labels, candidates)
        result["settings"] = settings
        for fold in result["folds"]:
            fold["setting"] = settings[fold["candidate"]]
        result["in_sample_best_setting"] = settings[result["in_sample_best_candidate"]]
        out[scorer] = result
    return out


def variant_logo(
    data: Mapping[str, NabSeries],
    windows: Sequence[int],
    inputs: Sequence[str],
    scorers: Sequence[str],
) -> dict[str, Any]:
    """Per scorer, LOGO over every (window, input, setting); JSON-ready.

    Raises:
        ValueError: No window, a window below 2, or an unknown input.
    """
    if not windows or min(windows) < 2:
        raise ValueError(f"z-score windows must be >= 2, got {list(windows)}")
    keys = sorted(data)
    natives = {
        (w, src): [run_variant(data[k], w, src) for k in keys] for w in windows for src in inputs
    }
    scored = joint_logo(data, natives, ("window", "input"), scorers)
    return {"windows": list(windows), "inputs": list(inputs), "scorers": scored}


def format_variant_logo(result: Mapping[str, Any]) -> list[str]:
    """Markdown lines of :func:`variant_logo`'s result."""
    title = f"Z-score variants (windows {result['windows']}, inputs {result['inputs']})"
    return format_joint_logo(title, result["scorers"], ("window", "input"))


def format_joint_logo(title: str, scorers: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Markdown lines: per scorer the pooled / strict held-out score and the folds' picks."""
    lines = [
        f"\n{title}, chosen leave-one-group-out with the scorer's setting: pooled / strict / "
        "in-sample best\n",
        f"| scorer | pooled std | strict std | in-sample best | folds' picks ({', '.join(names)}) |",
        "|---|---|---|---|---|",
    ]
    for scorer, r in scorers.items():
        picks = ", ".join(
            f"{f['held_out']}: " + "/".join(str(f["setting"][n]) for n in names) for f in r["folds"]
        )
        lines.append(
            f"| {scorer} | {r['pooled']['standard']:.1f} | {r['strict_standard']:.1f} | "
            f"{r['in_sample_best_standard']:.1f} | {picks} |"
        )
    return lines
