"""ARTime rows of ``flinkai bench anomaly``: ``artime`` and ``artime_learnt``.

* ``artime``: :class:`~flinkai_bench.research.anomaly.artime.ArtimeDetector` with NAB's inputs,
  the file's min/max and its probationary length (the scoreboard's protocol, both
  carrying future data).
* ``artime_learnt``: the range learnt from the probation, widened by
  ``--artime-margin`` of its span (default :data:`~flinkai_bench.research.anomaly.artime.DEFAULT_MARGIN`).

Each key keeps ``--artime-max-categories`` categories (default
:data:`~flinkai_bench.research.anomaly.artime.DEFAULT_MAX_CATEGORIES`, for the 64 KB state budget;
0 keeps all, as ARTime does). ``--artime-probation N`` fixes the probation for both rows instead of NAB's
per-file length, as a stream must (it knows no length). ``--artime-margins X,X,...``
adds a joint leave-one-group-out over the learnt range's margin and each scorer's
setting, and with ``--artime-probations N,N,...`` over the probation too. Every ``--round-trip-every``-th point takes the state round trip (snapshot,
pickle, unpickle, rebuild), timed as an operator step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from flinkai.anomaly.nab import NabSeries, probationary_length
from flinkai_bench.anomaly_rounds import score_with_round_trips
from flinkai_bench.anomaly_run import DetectorRun
from flinkai_bench.anomaly_variants import format_joint_logo, joint_logo
from flinkai_bench.research.anomaly.artime import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_CATEGORIES,
    ArtimeConfig,
    ArtimeDetector,
)
from flinkai_bench.research.anomaly.keyed import ValueKeyDetector, ValueModel

__all__ = [
    "ARTIME_DETECTORS",
    "ArtimeBench",
    "artime_config",
    "artime_logo",
    "artime_model",
    "format_artime_logo",
    "run_artime",
]

ARTIME_DETECTORS = ("artime", "artime_learnt")
#: The settings of :func:`artime_logo`'s joint choice.
NAMES = ("probation", "margin")


@dataclass(frozen=True)
class ArtimeBench:
    """The ARTime rows' settings.

    Attributes:
        margin: ``artime_learnt``'s margin.
        probation: A fixed probation for both rows; ``None``: NAB's per file.
        margins: Margins of the leave-one-group-out choice; ``None``: not run.
        probations: Probations of that choice (``None`` in it: NAB's per file);
            ``None``: the rows' own only.
        max_categories: Categories kept per key (0: all, as ARTime does).
    """

    margin: float = DEFAULT_MARGIN
    probation: int | None = None
    margins: Sequence[float] | None = None
    max_categories: int = DEFAULT_MAX_CATEGORIES
    probations: Sequence[int | None] | None = None

    def __post_init__(self) -> None:
        # the detector's own checks, before the bench runs anything
        for p in (self.probation, *(self.probations or ())):
            for m in (self.margin, *(self.margins or ())):
                ArtimeConfig(p or 750, margin=m, max_categories=self.max_categories)


def artime_config(
    name: str,
    values: np.ndarray,
    bench: ArtimeBench,
    margin: float | None = None,
    probation: int | None = None,
) -> ArtimeConfig:
    """One file's config under row ``name`` (``margin``/``probation``: the bench's
    unless given; a probation of ``None`` anywhere means NAB's for the file)."""
    probation = probation or bench.probation or probationary_length(len(values))
    cap = bench.max_categories
    if name == "artime":
        return ArtimeConfig(probation, float(values.min()), float(values.max()), max_categories=cap)
    return ArtimeConfig(
        probation, margin=bench.margin if margin is None else margin, max_categories=cap
    )


def artime_model(name: str, config: ArtimeConfig) -> ValueModel:
    """Row ``name``'s detector for one file as a research :class:`ValueModel`."""
    return ValueModel(
        name, partial(ArtimeDetector, config), partial(ArtimeDetector.from_snapshot, config=config)
    )


def run_artime(
    run: DetectorRun, data: Mapping[str, NabSeries], bench: ArtimeBench, every: int
) -> DetectorRun:
    """Score every series with row ``run.name``; see the module docstring."""
    for key, s in data.items():
        model = artime_model(run.name, artime_config(run.name, s.values, bench))
        restore = partial(ValueKeyDetector.from_snapshot, model=model)
        rows = range(len(s.values))  # the row as the time: NAB scores rows in file order
        det, _ = score_with_round_trips(
            run, key, rows, s.values, ValueKeyDetector(model), restore, every
        )
        run.native[key] = run.scores[key].copy()
        assert isinstance(det, ValueKeyDetector) and isinstance(det.inner, ArtimeDetector)
        run.categories[key] = det.inner.categories
    return run


def artime_logo(
    data: Mapping[str, NabSeries],
    bench: ArtimeBench,
    scorers: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Per scorer, LOGO over every (probation, learnt range's margin, scorer setting);
    JSON-ready (a probation of ``"nab"``: NAB's per file)."""
    say = progress or (lambda _line: None)
    keys = sorted(data)
    probations = list(bench.probations or [bench.probation])
    natives: dict[tuple[Any, ...], list[np.ndarray]] = {}
    for p in probations:
        for m in bench.margins or ():
            t0 = time.perf_counter()
            per_file = []
            for k in keys:
                config = artime_config("artime_learnt", data[k].values, bench, m, p)
                det = ArtimeDetector(config)
                per_file.append(np.array([det.update(v) for v in data[k].values.tolist()]))
            natives[(p or "nab", m)] = per_file
            say(f"  ARTime, learnt range, probation {p or 'nab'}, margin {m}: "
                f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    return {
        "margins": list(bench.margins or ()),
        "probations": [p or "nab" for p in probations],
        "max_categories": bench.max_categories,
        "scorers": joint_logo(data, natives, NAMES, scorers),
    }


def format_artime_logo(result: Mapping[str, Any]) -> list[str]:
    """Markdown lines of :func:`artime_logo`'s result."""
    title = (
        f"ARTime with a learnt range (probations {result['probations']}, "
        f"margins {result['margins']}, {result['max_categories']} categories)"
    )
    return format_joint_logo(title, result["scorers"], NAMES)
