"""``flinkai bench anomaly``: streaming anomaly detectors side by side on NAB.

Every detector sees every series of a NAB-layout folder point by point, scoring
each point before learning it. Detectors:

* ``hybrid``: the LSTM + attention forecaster (ONNX step, :mod:`flinkai.anomaly`),
  run as the Flink operator runs it with ``model = 'hybrid'``: per point the key's
  state is unpickled, rebuilt (:meth:`SeriesDetector.from_snapshot`), updated and
  pickled. Its operator scorer is the forecasters' Gaussian one (``ScorerConfig()``,
  the operator's default before ``zscore``) unless ``--operator-scorer`` says otherwise.
* ``lstm``: the same without the attention layer (the ablation).
* ``zscore``, ``robust_zscore``, ``iqr``: Apache Beam's definitions
  (:mod:`flinkai_bench.research.anomaly.baselines`).
* ``hst``: river's HalfSpaceTrees.
* ``cad`` and ``cad_probation`` (not in the default set; run when named): CAD OSE
  (:mod:`flinkai.anomaly.cad`), ``cad`` with NAB's value range (min/max of the whole
  file, so it sees future values) and ``cad_probation`` with the range learnt from
  the probationary rows only. Every 100th point goes through the operator's state
  round trip (snapshot, pickle, unpickle, rebuild) and is timed as an operator step.
  ``cad_capped`` and ``cad_probation_capped`` are the same with the context store
  bounded (``--cad-max-contexts``, least recently used evicted).
* ``zscore_operator`` (not in the default set; run when named): Beam's ZScore as
  the operator runs it (``model = 'zscore'``, :mod:`flinkai.anomaly.statistical`):
  per point the key's state is unpickled, rebuilt, updated and pickled, with the
  operator's default scorer (or ``--operator-scorer``); its native output is the
  z-score, so its scorer rows equal ``zscore``'s.
* ``cad_operator`` (run when named): ``model = 'cad'`` as the operator runs it
  (:mod:`flinkai.anomaly.contextual`: 1,000 contexts, rest period 30), each file with
  NAB's range (its own min/max, future values included, as NAB gives every
  detector); every 100th point takes the state round trip.
* ``cad_learnt_operator`` (run when named): ``model = 'cad'`` without a range, as
  the operator runs it: each key learns its range from its first values and grows it
  (:mod:`flinkai.anomaly.cad_growing`), so it uses no future data; the same round
  trip. ``--cad-learn-points`` / ``--cad-margins`` choose its settings leave-one-group-
  out (:mod:`flinkai_bench.anomaly_cad_learnt`).
* ``artime`` and ``artime_learnt`` (run when named): ARTime
  (:mod:`flinkai_bench.research.anomaly.artime`) with NAB's range and probation, and with the range
  learnt from the probation (:mod:`flinkai_bench.anomaly_artime`).
* ``ensemble_max`` and ``ensemble_mean`` (run when named): per point the max or
  the mean of two members' final scores: ``zscore`` through ``numenta_stream`` at its
  default setting, and ``cad_probation_capped``'s own score. Their
  native output is ``e / (1 - e)`` of that score ``e``, so their ``raw`` scorer row
  is the ensemble's own score (other scorers apply on top of it).
* ``zscore_gated`` (not in the default set; a control): Beam's ZScore followed by
  the forecasters' peak gate (a score is kept only above every score of the last
  ``ScorerConfig.peak_window`` points), to show what that post-processing alone
  does for a statistical detector.

Unbounded scores ``s`` are mapped to ``s / (1 + s)`` (same order, so the same
detections at the matching threshold) and NaN to 0, so NAB's "never fire"
threshold of 1.1 keeps its meaning. The threshold of each detector and profile is
optimised over the whole folder (NAB's rule); the per-group rows use that
threshold. Event-level precision/recall/F1 are at the ``standard`` threshold.

Latency: the ONNX step alone, and the whole operator step (state load, detector
update, state store) per point, p50/p99 in ms over all points; state bytes per key
is the pickled snapshot's size.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.anomaly.cad import (
    CadDetector,
    rest_masked,
)
from flinkai.anomaly.cad_growing import GrowingRangeCad, GrowingRangeConfig
from flinkai.anomaly.contextual import (
    CAD_MODEL,
    DEFAULT_MAX_CONTEXTS,
    LEARNT_REST_PERIOD,
    CadModel,
    CadSeriesDetector,
)
from flinkai.anomaly.detector import DetectorConfig
from flinkai.anomaly.errors import DetectorInputError, NabDataError
from flinkai.anomaly.features import ScorerConfig
from flinkai.anomaly.keyed import new_detector, restore_detector
from flinkai.anomaly.nab import LabelledSeries, NabSeries, load_nab_folder, probationary_length
from flinkai.anomaly.spec import anomaly_models_dir
from flinkai.anomaly.statistical import ZSCORE_MODEL, ZScoreModel
from flinkai.anomaly.step import RecurrentState, StepModel
from flinkai.anomaly.train import timestamps_ms
from flinkai.config.core import coerce_value
from flinkai.errors import ConfigError, SetupError
from flinkai_bench.anomaly_artime import (
    ARTIME_DETECTORS,
    ArtimeBench,
    artime_logo,
    format_artime_logo,
    run_artime,
)
from flinkai_bench.anomaly_cad_learnt import format_learnt_logo, learnt_logo
from flinkai_bench.anomaly_rounds import score_with_round_trips
from flinkai_bench.anomaly_run import DetectorRun
from flinkai_bench.anomaly_variants import (
    INPUTS,
    format_joint_logo,
    format_variant_logo,
    joint_logo,
    variant_logo,
)
from flinkai_bench.research.anomaly.artime import DEFAULT_MARGIN, DEFAULT_MAX_CATEGORIES
from flinkai_bench.research.anomaly.baselines import (
    IQR,
    HalfSpaceTrees,
    RobustZScore,
    StreamingDetector,
    ZScore,
)
from flinkai_bench.research.anomaly.cad_nab import (
    ProbationRangeCad,
    nab_cad_config,
    nab_rest_period,
)
from flinkai_bench.research.anomaly.keyed import ValueKeyDetector, ValueModel
from flinkai_bench.research.anomaly.logo import logo_select
from flinkai_bench.research.anomaly.nab_score import (
    PROFILES,
    evaluate,
    event_metrics_corpus,
    optimize_threshold,
)
from flinkai_bench.research.anomaly.scorers import (
    DEFAULTS,
    SCORERS,
    SETTINGS,
    apply_scorer,
    peak_gated,
)
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = [
    "CONTROLS",
    "DETECTORS",
    "ENSEMBLES",
    "OPERATOR_DETECTORS",
    "SERIES_DETECTORS",
    "DetectorRun",
    "default_data_dir",
    "format_tables",
    "pick_series",
    "register",
    "run_anomaly_bench",
    "run_detector",
    "scorer_logo",
    "scorer_summary",
    "suite_entry",
    "summarize",
]

#: Detector names, in table order.
DETECTORS = ("hybrid", "lstm", "zscore", "robust_zscore", "iqr", "hst")
#: Detectors run only when named with ``--detectors``.
CONTROLS = ("zscore_gated",)
#: Detectors run through the operator's own per-key code, run only when named.
OPERATOR_DETECTORS = ("zscore_operator", "cad_operator", "cad_learnt_operator")
#: Per-point combinations of two members' final scores, run only when named.
ENSEMBLES = ("ensemble_max", "ensemble_mean")
#: Detectors built per series (value range, probation), run only when named.
SERIES_DETECTORS = ("cad", "cad_probation", "cad_capped", "cad_probation_capped")
#: Context cap of the ``*_capped`` CAD detectors unless ``--cad-max-contexts`` says otherwise.
CAD_MAX_CONTEXTS = 300
#: One point in this many of a per-series detector takes the operator's state round trip.
_ROUND_TRIP_EVERY = 100
_NEURAL = ("hybrid", "lstm")
_BASELINES: Mapping[str, Callable[[], StreamingDetector]] = {
    "zscore": ZScore,
    "robust_zscore": RobustZScore,
    "iqr": IQR,
    "hst": HalfSpaceTrees,
}
_GATED: Mapping[str, Callable[[], StreamingDetector]] = {"zscore_gated": ZScore}
_SHORT = {"standard": "std", "reward_low_FP_rate": "lowFP", "reward_low_FN_rate": "lowFN"}

FloatArray = npt.NDArray[np.float64]


def default_data_dir() -> Path:
    """``../shared/datasets/nab`` next to the checkout (or the working directory)."""
    from flinkai.paths import repo_root

    root = repo_root() or Path.cwd()
    return root.parent / "shared" / "datasets" / "nab"


class _TimedStep:
    """A :class:`StepModel` stand-in that times each ONNX step."""

    def __init__(self, model: StepModel, times: list[float]) -> None:
        self.spec = model.spec
        self.model_version = model.model_version
        self._model = model
        self._times = times

    def step(self, x: Any, state: RecurrentState) -> tuple[float, RecurrentState]:
        t0 = time.perf_counter()
        out = self._model.step(x, state)
        self._times.append((time.perf_counter() - t0) * 1000)
        return out


def _bounded(raw: float) -> float:
    if raw is None or math.isnan(raw):
        return 0.0
    return raw / (1.0 + raw) if raw >= 0 else 0.0


def _series_model(name: str, series: NabSeries, max_contexts: int) -> ValueModel:
    """A ``cad*`` row's detector for one file: NAB's range, or one learnt in its probation."""
    probation = probationary_length(len(series.values))
    cap = max_contexts if name.endswith("_capped") else 0
    if name in ("cad", "cad_capped"):
        values = series.values
        config = nab_cad_config(values.min(), values.max(), probation, cap)
        return ValueModel(
            name, lambda: CadDetector(config), partial(CadDetector.from_snapshot, config=config)
        )
    rest = nab_rest_period(probation)
    return ValueModel(
        name,
        lambda: ProbationRangeCad(probation, rest, cap),
        lambda state: ProbationRangeCad.from_snapshot(state, probation, rest, cap),
    )


def _run_series_detector(
    run: DetectorRun, data: Mapping[str, NabSeries], max_contexts: int
) -> DetectorRun:
    for key, s in data.items():
        model = _series_model(run.name, s, max_contexts)
        restore = partial(ValueKeyDetector.from_snapshot, model=model)
        rows = range(len(s.values))  # the row as the time: NAB scores rows in file order
        det = ValueKeyDetector(model)
        score_with_round_trips(run, key, rows, s.values, det, restore, _ROUND_TRIP_EVERY)
        run.native[key] = run.scores[key].copy()
    return run


def _run_operator_model(
    run: DetectorRun,
    data: Mapping[str, NabSeries],
    model: Any,
    config: DetectorConfig,
    every: int = 1,
) -> DetectorRun:
    """An operator model through the operator's per-key code (:mod:`flinkai.anomaly.keyed`),
    its state round trip at every ``every``-th point (1: every point, as the job does).

    ``native`` is the detector's own output before the scorer (``last_error``).
    """
    run.model_version = model.model_version
    for key, s in data.items():
        det = new_detector(model, config)
        restore = partial(restore_detector, model=model, config=config)
        stamps = timestamps_ms(s).tolist()
        _, errors = score_with_round_trips(run, key, stamps, s.values, det, restore, every)
        run.native[key] = errors
    return run


def _run_cad_operator(
    run: DetectorRun,
    data: Mapping[str, NabSeries],
    max_contexts: int,
    every: int,
    learnt: bool = False,
) -> DetectorRun:
    """``model = 'cad'`` through the operator's per-key code: with NAB's range per
    file, or (``learnt``) without a range, each key learning its own.

    Every ``every``-th point (100 unless ``--round-trip-every``) goes through the state
    round trip (snapshot, pickle, unpickle, rebuild) and is timed as an operator step,
    its pickled state size noted; a round trip at every point gives the same scores
    (tests/unit/test_anomaly_contract.py). ``native`` is the final score (CAD's is
    its own); ``cad_raw`` CAD's raw score before the rest period.
    """
    for key, s in data.items():
        if learnt:
            model = CadModel(max_contexts=max_contexts)
        else:
            model = CadModel(float(s.values.min()), float(s.values.max()), max_contexts)
        config = DetectorConfig(model=CAD_MODEL, threshold=model.threshold)
        run.model_version = model.model_version.split("-r", 1)[0]
        restore = partial(restore_detector, model=model, config=config)
        stamps = timestamps_ms(s).tolist()
        det, raw = score_with_round_trips(
            run, key, stamps, s.values, new_detector(model, config), restore, every
        )
        run.native[key] = run.scores[key].copy()
        run.cad_raw[key] = np.nan_to_num(raw, nan=0.0)
        assert isinstance(det, CadSeriesDetector)
        if isinstance(det.cad, GrowingRangeCad):
            run.regrowths[key] = det.cad.regrowths
    return run


def _run_ensemble(
    name: str, data: Mapping[str, NabSeries], member: Callable[[str], DetectorRun]
) -> DetectorRun:
    """``name``'s combination of the z-score (numenta_stream) and capped CAD members."""
    run = DetectorRun(name)
    zscore, cad = member("zscore"), member("cad_probation_capped")
    combine = np.maximum if name == "ensemble_max" else (lambda a, b: (a + b) / 2.0)
    for key, s in data.items():
        z = apply_scorer("numenta_stream", zscore.native[key], s.values)
        c = np.clip(np.nan_to_num(cad.native[key], nan=0.0), 0.0, 1.0)
        e = np.asarray(combine(z, c), dtype=np.float64)
        run.scores[key] = e
        # e / (1 - e): the raw scorer's s / (1 + s) gives e back (1.0 stays infinite).
        with np.errstate(divide="ignore"):
            run.native[key] = np.where(e < 1.0, e / (1.0 - np.minimum(e, 1.0)), np.inf)
    return run


def run_detector(
    name: str,
    data: Mapping[str, NabSeries],
    models_root: Path | None = None,
    operator_scorer: ScorerConfig | None = None,
    cad_max_contexts: int | None = None,
    round_trip_every: int = _ROUND_TRIP_EVERY,
    artime: ArtimeBench | None = None,
) -> DetectorRun:
    """Run one detector over every series.

    ``operator_scorer`` replaces the forecasters' default scorer in the operator path
    (their ``scores``, latency and state size); ``native`` is the same either way.

    Raises:
        SetupError: A forecaster's model folder is missing.
    """
    run = DetectorRun(name)
    if name in ARTIME_DETECTORS:
        return run_artime(run, data, artime or ArtimeBench(), round_trip_every)
    if name in ("cad_operator", "cad_learnt_operator"):
        cap = cad_max_contexts or DEFAULT_MAX_CONTEXTS  # the operator's own default
        return _run_cad_operator(run, data, cap, round_trip_every, name == "cad_learnt_operator")
    if name in OPERATOR_DETECTORS:
        config = DetectorConfig(model=ZSCORE_MODEL)
        if operator_scorer is not None:
            config = DetectorConfig(model=ZSCORE_MODEL, scorer=operator_scorer)
        return _run_operator_model(run, data, ZScoreModel(), config)
    if name in _NEURAL:
        folder = (models_root or anomaly_models_dir()) / name
        try:
            model = StepModel(folder)
        except Exception as e:
            raise SetupError(f"{name}: {e}") from e
        timed: Any = _TimedStep(model, run.step_ms)
        config = DetectorConfig(model=str(folder), scorer=operator_scorer or ScorerConfig())
        return _run_operator_model(run, data, timed, config)
    if name in SERIES_DETECTORS:
        return _run_series_detector(run, data, cad_max_contexts or CAD_MAX_CONTEXTS)
    factory = _BASELINES.get(name) or _GATED[name]
    gate = ScorerConfig().peak_window if name in _GATED else 0
    for key, s in data.items():
        base = factory()
        out = np.zeros(len(s.values))
        native = np.full(len(s.values), np.nan)
        for i, v in enumerate(s.values.tolist()):
            t0 = time.perf_counter()
            raw = base.score_one(v)
            base.learn_one(v)
            run.step_ms.append((time.perf_counter() - t0) * 1000)
            out[i] = _bounded(raw)
            native[i] = raw
        if gate:
            out = peak_gated(out, gate)
        run.scores[key] = out
        run.native[key] = native
    return run


def _percentiles(ms: Sequence[float]) -> dict[str, float] | None:
    if not ms:
        return None
    p50, p99 = np.percentile(np.asarray(ms), [50, 99])
    return {"p50_ms": round(float(p50), 4), "p99_ms": round(float(p99), 4), "n": len(ms)}


def summarize(run: DetectorRun, data: Mapping[str, NabSeries]) -> dict[str, Any]:
    """NAB scores per group and overall, event metrics, latency and state size."""
    items: list[tuple[LabelledSeries, FloatArray]] = [
        (data[k].labels, run.scores[k]) for k in sorted(data)
    ]
    groups = sorted({k.split("/", 1)[0] for k in data})
    thresholds = {p: optimize_threshold(items, prof).threshold for p, prof in PROFILES.items()}

    def block(subset: list[tuple[LabelledSeries, FloatArray]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p, prof in PROFILES.items():
            try:
                out[p] = round(evaluate(subset, prof, threshold=thresholds[p]).normalized, 2)
            except NabDataError:  # a group without labelled windows has no NAB score
                out[p] = None
        ev = event_metrics_corpus(subset, thresholds["standard"])
        out.update(
            precision=round(ev.precision, 4), recall=round(ev.recall, 4), f1=round(ev.f1, 4),
            tp=ev.tp, fp=ev.fp, fn=ev.fn,
        )  # fmt: skip
        return out

    by_group = {g: block([it for it in items if it[0].name.split("/", 1)[0] == g]) for g in groups}
    return {
        "thresholds": thresholds,
        "all": block(items),
        "groups": by_group,
        "step_latency": _percentiles(run.step_ms),
        "operator_step_latency": _percentiles(run.operator_ms),
        "state_bytes_per_key": run.state_bytes,
        "model_version": run.model_version,
        "rejected_points": run.rejected,
        **({"range_regrowths": _regrowths(run.regrowths)} if run.regrowths else {}),
        **({"art_categories": _categories(run.categories)} if run.categories else {}),
    }


def _regrowths(per_key: Mapping[str, int]) -> dict[str, Any]:
    counts = list(per_key.values())
    return {"total": sum(counts), "max_per_key": max(counts), "keys": len(counts)}


def _categories(per_key: Mapping[str, int]) -> dict[str, Any]:
    counts = list(per_key.values())
    return {"max_per_key": max(counts), "median_per_key": float(np.median(counts))}


def _scored(
    run: DetectorRun, data: Mapping[str, NabSeries], scorer: str, setting: Mapping[str, Any] | None
) -> list[FloatArray]:
    return [apply_scorer(scorer, run.native[k], data[k].values, setting) for k in sorted(data)]


def scorer_summary(
    run: DetectorRun, data: Mapping[str, NabSeries], scorers: Sequence[str] = SCORERS
) -> dict[str, Any]:
    """The detector's native output through each scorer option at its default setting.

    One threshold per profile over all files (NAB's rule); event metrics at the
    standard threshold.
    """
    labels = [data[k].labels for k in sorted(data)]
    out: dict[str, Any] = {}
    for scorer in scorers:
        items = list(zip(labels, _scored(run, data, scorer, None), strict=True))
        row: dict[str, Any] = {"setting": dict(DEFAULTS[scorer])}
        for p, prof in PROFILES.items():
            row[p] = round(evaluate(items, prof).normalized, 2)
        ev = event_metrics_corpus(items, optimize_threshold(items, PROFILES["standard"]).threshold)
        row.update(f1=round(ev.f1, 4), precision=round(ev.precision, 4), recall=round(ev.recall, 4))
        out[scorer] = row
    return out


def scorer_logo(
    run: DetectorRun, data: Mapping[str, NabSeries], scorers: Sequence[str] = SCORERS
) -> dict[str, Any]:
    """Leave-one-group-out choice of each scorer's setting (:mod:`flinkai_bench.research.anomaly.logo`)."""
    labels = [data[k].labels for k in sorted(data)]
    out: dict[str, Any] = {}
    for scorer in scorers:
        settings = list(SETTINGS[scorer])
        candidates = [_scored(run, data, scorer, setting) for setting in settings]
        result = logo_select(labels, candidates)
        result["settings"] = [dict(st) for st in settings]
        for fold in result["folds"]:
            fold["setting"] = dict(settings[fold["candidate"]])
        out[scorer] = result
    return out


def run_anomaly_bench(
    data_dir: Path,
    detectors: Sequence[str] = DETECTORS,
    models_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
    scorers: Sequence[str] = SCORERS,
    protocol: str = "fixed",
    operator_scorer: ScorerConfig | None = None,
    cad_max_contexts: int | None = None,
    zscore_variants: tuple[Sequence[int], Sequence[str]] | None = None,
    cad_rest_periods: Sequence[int] | None = None,
    round_trip_every: int = _ROUND_TRIP_EVERY,
    cad_learnt_grid: tuple[Sequence[int], Sequence[float]] | None = None,
    artime: ArtimeBench | None = None,
) -> dict[str, Any]:
    """Run the detectors on a NAB-layout folder and summarise each.

    Each detector's output also goes through every scorer option in ``scorers``:
    at the default settings (``protocol="fixed"``), or, with ``protocol="logo"``,
    with settings chosen leave-one-group-out as well. ``zscore_variants`` (windows,
    inputs) adds a joint LOGO over those z-score variants and the scorers' settings
    (:mod:`flinkai_bench.anomaly_variants`). ``cad_rest_periods`` adds a joint LOGO
    over ``cad_operator``'s rest period and the scorers' settings (one run: the rest
    period only hides scores, :func:`~flinkai.anomaly.cad.rest_masked`); the same for
    ``cad_learnt_operator``. ``cad_learnt_grid`` (learn points, margins) adds a joint
    LOGO over the learnt-range CAD's settings and those rest periods
    (:mod:`flinkai_bench.anomaly_cad_learnt`). ``artime`` sets the ARTime rows, and
    with ``margins`` adds a joint LOGO over the learnt range's margin
    (:mod:`flinkai_bench.anomaly_artime`).

    Returns:
        JSON-ready results: run facts and one summary per detector.
    """
    say = progress or (lambda _line: None)
    data = load_nab_folder(data_dir)
    rows = sum(len(s.values) for s in data.values())
    say(f"{len(data)} series, {rows} points from {data_dir}")
    results: dict[str, Any] = {}
    runs: dict[str, DetectorRun] = {}

    def member(name: str) -> DetectorRun:
        if name not in runs:
            runs[name] = run_detector(
                name,
                data,
                models_root,
                operator_scorer,
                cad_max_contexts,
                round_trip_every,
                artime,
            )
        return runs[name]

    for name in detectors:
        t0 = time.perf_counter()
        run = _run_ensemble(name, data, member) if name in ENSEMBLES else member(name)
        results[name] = summarize(run, data)
        results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        t1 = time.perf_counter()
        results[name]["scorers"] = scorer_summary(run, data, scorers)
        if protocol == "logo":
            results[name]["logo"] = scorer_logo(run, data, scorers)
        results[name]["scorer_seconds"] = round(time.perf_counter() - t1, 1)
        say(
            f"  {name}: {results[name]['seconds']} s, NAB standard {results[name]['all']['standard']}"
        )
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "python": platform.python_version(),
        },
        "data": str(data_dir),
        "series": len(data),
        "points": rows,
        "groups": sorted({k.split("/", 1)[0] for k in data}),
        "protocol": protocol,
        "cad_max_contexts": cad_max_contexts,
        "detectors": results,
    }
    for name, out_key in (("cad_operator", "cad_rest_variants"),
                          ("cad_learnt_operator", "cad_learnt_rest_variants")):  # fmt: skip
        if cad_rest_periods and name in runs:
            keys = sorted(data)
            raw = runs[name].cad_raw
            natives = {
                (r,): [np.asarray(rest_masked(raw[k].tolist(), r)) for k in keys]
                for r in cad_rest_periods
            }
            out[out_key] = {
                "detector": name,
                "rest_periods": list(cad_rest_periods),
                "max_contexts": cad_max_contexts or DEFAULT_MAX_CONTEXTS,
                "scorers": joint_logo(data, natives, ("rest_period",), scorers),
            }
    if cad_learnt_grid is not None:
        out["cad_learnt_variants"] = learnt_logo(
            data,
            *cad_learnt_grid,
            cad_rest_periods or [LEARNT_REST_PERIOD],
            cad_max_contexts or DEFAULT_MAX_CONTEXTS,
            scorers,
            say,
        )
    if artime is not None and artime.margins:
        out["artime_learnt_variants"] = artime_logo(data, artime, scorers, say)
    if zscore_variants is not None:
        t0 = time.perf_counter()
        out["zscore_variants"] = variant_logo(data, *zscore_variants, scorers)
        say(f"  z-score variants: {time.perf_counter() - t0:.1f} s")
    return out


def format_tables(result: Mapping[str, Any]) -> str:
    """One Markdown table per NAB group (and ``all``), then latency and state size."""
    dets: Mapping[str, Any] = result["detectors"]
    variants = format_variant_logo(result["zscore_variants"]) if "zscore_variants" in result else []
    if "artime_learnt_variants" in result:
        variants += format_artime_logo(result["artime_learnt_variants"])
    for out_key in ("cad_rest_variants", "cad_learnt_rest_variants"):
        if out_key in result:
            r = result[out_key]
            variants += format_joint_logo(
                f"{r.get('detector', 'cad_operator')}'s rest period ({r['rest_periods']}, "
                f"{r['max_contexts']} contexts)",
                r["scorers"],
                ("rest_period",),
            )
    if "cad_learnt_variants" in result:
        variants += format_learnt_logo(result["cad_learnt_variants"])
    if not dets:
        return "\n".join(variants)
    first = next(iter(dets.values()))
    lines: list[str] = []
    head = "| detector | NAB std | NAB lowFP | NAB lowFN | P | R | F1 | FP rows |"
    for group in [*sorted(first["groups"]), "all"]:
        lines += [f"\n{group}\n", head, "|---|---|---|---|---|---|---|---|"]
        for name, r in dets.items():
            b = r["all"] if group == "all" else r["groups"][group]
            nab = " | ".join("-" if b[p] is None else f"{b[p]:.1f}" for p in PROFILES)
            lines.append(
                f"| {name} | {nab} | {b['precision']:.2f} | {b['recall']:.2f} | {b['f1']:.2f} | "
                f"{b['fp']} |"
            )
    lines += ["\n| detector | step p50 ms | step p99 ms | operator step p50 / p99 ms | state bytes/key |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, r in dets.items():
        s, o = r["step_latency"] or {}, r["operator_step_latency"]
        op = f"{o['p50_ms']:.3f} / {o['p99_ms']:.3f}" if o else "-"
        lines.append(
            f"| {name} | {s.get('p50_ms', 0):.3f} | {s.get('p99_ms', 0):.3f} | {op} | "
            f"{r['state_bytes_per_key'] or '-'} |"
        )
    lines += _scorer_tables(dets)
    return "\n".join([*lines, *variants])


def _scorer_tables(dets: Mapping[str, Any]) -> list[str]:
    """Detector x scorer: default settings, then (if run) the LOGO results."""
    with_scorers = {n: r for n, r in dets.items() if r.get("scorers")}
    if not with_scorers:
        return []
    scorers = list(next(iter(with_scorers.values()))["scorers"])
    lines = [
        "\nNAB standard, each detector through each scorer at its default setting "
        "(threshold over all files, NAB's rule; F1 at that threshold)\n",
        "| detector | " + " | ".join(scorers) + " |",
        "|---|" + "---|" * len(scorers),
    ]
    for name, r in with_scorers.items():
        cells = [f"{r['scorers'][sc]['standard']:.1f} (F1 {r['scorers'][sc]['f1']:.2f})"
                 for sc in scorers]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    logo = {n: r["logo"] for n, r in with_scorers.items() if r.get("logo")}
    if logo:
        lines += [
            "\nLeave-one-group-out: settings chosen on the other groups; pooled held-out NAB "
            "standard with one threshold over all files (NAB's rule) / with each group at its "
            "fold's threshold (strict) / in-sample best (chosen on all files: leaky, for "
            "comparison)\n",
            "| detector | " + " | ".join(scorers) + " |",
            "|---|" + "---|" * len(scorers),
        ]
        for name, r in logo.items():
            cells = [
                f"{r[sc]['pooled']['standard']:.1f} / {r[sc]['strict_standard']:.1f} / "
                f"{r[sc]['in_sample_best_standard']:.1f}"
                for sc in scorers
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _operator_scorer(spec: str | None) -> ScorerConfig | None:
    """``field=value,...`` of :class:`ScorerConfig`, typed as the operator types its options."""
    if not spec:
        return None
    hints = typing.get_type_hints(ScorerConfig)
    fields: dict[str, Any] = {}
    for part in spec.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or name not in hints:
            raise ConfigError(f"{part!r}: expected field=value with a field of {sorted(hints)}")
        fields[name] = coerce_value(hints[name], raw.strip(), name)
    return ScorerConfig(**fields)


def _int_list(text: str, flag: str, minimum: int) -> list[int] | str:
    """``N,N,...`` as integers ``>= minimum``, or the error to print."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return f"{flag}: expected integers, got {text!r}"
    if not values or min(values) < minimum:
        return f"{flag}: each value must be >= {minimum}, got {text!r}"
    return values


def _zscore_variants(windows: str | None, inputs: str) -> tuple[list[int], list[str]] | str | None:
    """``--zscore-windows``/``--zscore-inputs`` parsed, ``None`` when not asked, or the error."""
    if not windows:
        return None
    sizes = _int_list(windows, "--zscore-windows", 2)
    if isinstance(sizes, str):
        return sizes
    sources = [x.strip() for x in inputs.split(",") if x.strip()]
    if not sources or any(x not in INPUTS for x in sources):
        return f"--zscore-inputs: choose from {', '.join(INPUTS)}"
    return sizes, sources


def _learnt_grid(
    learn_points: str | None, margins: str
) -> tuple[list[int], list[float]] | str | None:
    """``--cad-learn-points``/``--cad-margins`` parsed, ``None`` when not asked, or the error."""
    if not learn_points:
        return None
    counts = _int_list(learn_points, "--cad-learn-points", 1)
    if isinstance(counts, str):
        return counts
    try:
        widths = [float(x) for x in margins.split(",") if x.strip()]
    except ValueError:
        return f"--cad-margins: expected numbers, got {margins!r}"
    if not widths:
        return "--cad-margins: expected at least one number"
    # The detector's own settings check (margin, learn points within the history)
    # refuses a bad grid here, before the bench runs anything.
    try:
        for count in counts:
            for width in widths:
                GrowingRangeConfig(learn_points=count, margin=width)
    except DetectorInputError as e:
        return f"--cad-learn-points / --cad-margins: {e}"
    return counts, widths


def _artime_bench(
    margin: float,
    margins: str | None,
    probation: int | None,
    max_categories: int,
    probations: str | None = None,
) -> ArtimeBench | str:
    """The ``--artime-*`` flags parsed, or the error."""
    grid = None
    lengths: list[int | None] | None = None
    if probations:
        parsed = _int_list(probations, "--artime-probations", 1)
        if isinstance(parsed, str):
            return parsed
        lengths = list(parsed)
        if not margins:
            return "--artime-probations: give the margins too (--artime-margins)"
    if margins:
        try:
            grid = [float(x) for x in margins.split(",") if x.strip()]
        except ValueError:
            return f"--artime-margins: expected numbers, got {margins!r}"
        if not grid:
            return "--artime-margins: expected at least one number"
    try:
        return ArtimeBench(margin, probation, grid, max_categories, lengths)
    except DetectorInputError as e:
        return f"--artime-*: {e}"


def _handle(args: argparse.Namespace) -> int:
    detectors = [d.strip() for d in args.detectors.split(",") if d.strip()]
    named = (
        *DETECTORS,
        *OPERATOR_DETECTORS,
        *SERIES_DETECTORS,
        *ARTIME_DETECTORS,
        *ENSEMBLES,
        *CONTROLS,
    )
    unknown = [d for d in detectors if d not in named]
    if unknown:
        names = ", ".join(named)
        print(f"unknown detector(s) {unknown}; choose from {names}", file=sys.stderr)
        return 2
    data = Path(args.data) if args.data else default_data_dir()
    models = Path(args.models) if args.models else None
    try:
        operator_scorer = _operator_scorer(args.operator_scorer)
    except (ConfigError, ValueError) as e:
        print(f"--operator-scorer: {e}", file=sys.stderr)
        return 2
    if args.cad_max_contexts is not None and args.cad_max_contexts < 4:
        print("--cad-max-contexts: must be >= 4", file=sys.stderr)
        return 2
    scorers = [x.strip() for x in args.scorers.split(",") if x.strip()]
    if not scorers or any(x not in SCORERS for x in scorers):
        print(f"--scorers: choose from {', '.join(SCORERS)}", file=sys.stderr)
        return 2
    variants = _zscore_variants(args.zscore_windows, args.zscore_inputs)
    if isinstance(variants, str):
        print(variants, file=sys.stderr)
        return 2
    rests = (
        _int_list(args.cad_rest_periods, "--cad-rest-periods", 1) if args.cad_rest_periods else []
    )
    if isinstance(rests, str):
        print(rests, file=sys.stderr)
        return 2
    if args.round_trip_every < 1:
        print("--round-trip-every: must be >= 1", file=sys.stderr)
        return 2
    learnt = _learnt_grid(args.cad_learn_points, args.cad_margins)
    if isinstance(learnt, str):
        print(learnt, file=sys.stderr)
        return 2
    artime = _artime_bench(
        args.artime_margin,
        args.artime_margins,
        args.artime_probation,
        args.artime_max_categories,
        args.artime_probations,
    )
    if isinstance(artime, str):
        print(artime, file=sys.stderr)
        return 2
    try:
        result = run_anomaly_bench(
            data,
            detectors,
            models,
            lambda line: print(line, flush=True),
            scorers,
            args.protocol,
            operator_scorer,
            args.cad_max_contexts,
            variants,
            rests or None,
            args.round_trip_every,
            learnt,
            artime,
        )
    except SetupError as e:
        print(f"bench anomaly: {e}", file=sys.stderr)
        return 1
    print(format_tables(result))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench anomaly``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "anomaly",
        help="streaming anomaly detectors on NAB (forecasters vs Beam and river baselines)",
        description="Anomaly detectors on a NAB-layout folder; see benchmarks/README.md.",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="NAB-layout folder, data/<group>/*.csv with combined_windows.json, or a clone of NAB "
        "(default: ../shared/datasets/nab)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--detectors",
        default=",".join(DETECTORS),
        help="comma-separated subset of: "
        f"{', '.join((*DETECTORS, *OPERATOR_DETECTORS, *SERIES_DETECTORS, *ARTIME_DETECTORS, *ENSEMBLES, *CONTROLS))}",
    )
    parser.add_argument(
        "--models",
        metavar="DIR",
        help="folder with hybrid/ and lstm/ models (default: $FLINKAI_HOME/models/anomaly; "
        "build them with `flinkai model train-anomaly`)",
    )
    parser.add_argument(
        "--scorers",
        default=",".join(SCORERS),
        help="scorer options every detector's output goes through, side by side "
        f"(comma-separated subset of: {', '.join(SCORERS)})",
    )
    parser.add_argument(
        "--operator-scorer",
        metavar="FIELD=VALUE,...",
        help="the forecasters' operator scorer (ScorerConfig fields, as the operator's "
        "'scorer.<field>' options), e.g. likelihood=numenta,peak_window=0,numenta_history=3500",
    )
    parser.add_argument(
        "--cad-max-contexts",
        type=int,
        default=None,
        metavar="N",
        help="context cap of cad_capped, cad_probation_capped and cad_operator (least recently used "
        f"evicted; default {CAD_MAX_CONTEXTS}; cad_operator: the operator's "
        f"{DEFAULT_MAX_CONTEXTS})",
    )
    parser.add_argument(
        "--protocol",
        choices=("fixed", "logo"),
        default="fixed",
        help="fixed: each scorer at its default setting; logo: also choose each scorer's "
        "setting leave-one-group-out (on the other NAB groups' files only) and report the "
        "pooled held-out score",
    )
    parser.add_argument(
        "--round-trip-every",
        type=int,
        default=_ROUND_TRIP_EVERY,
        metavar="N",
        help=f"cad_operator, cad_learnt_operator, artime, artime_learnt: every N-th point takes the timed state round trip (default "
        f"{_ROUND_TRIP_EVERY}; 1: every point, as the operator does)",
    )
    parser.add_argument(
        "--cad-rest-periods",
        metavar="N,N,...",
        help="with cad_operator or cad_learnt_operator: also choose its rest period "
        "leave-one-group-out, jointly with each scorer's setting",
    )
    parser.add_argument(
        "--cad-learn-points",
        metavar="N,N,...",
        help="also choose the learnt-range CAD's settings leave-one-group-out: the values "
        "that fix each key's first range (with --cad-margins and --cad-rest-periods, jointly "
        "with each scorer's setting); an empty --detectors runs only this",
    )
    parser.add_argument(
        "--cad-margins",
        default="0",
        metavar="X,X,...",
        help="with --cad-learn-points: shares of the new span added beyond a value that grows "
        "the range (default: 0)",
    )
    parser.add_argument(
        "--artime-margin",
        type=float,
        default=DEFAULT_MARGIN,
        metavar="X",
        help="artime_learnt: share of the probation's span added on each side of its range "
        f"(default {DEFAULT_MARGIN})",
    )
    parser.add_argument(
        "--artime-margins",
        metavar="X,X,...",
        help="also choose artime_learnt's margin leave-one-group-out, jointly with each "
        "scorer's setting; an empty --detectors runs only this",
    )
    parser.add_argument(
        "--artime-probation",
        type=int,
        default=None,
        metavar="N",
        help="artime, artime_learnt: a fixed probation for every series, as a stream must "
        "(default: NAB's, 15%% of each file's length up to 750)",
    )
    parser.add_argument(
        "--artime-probations",
        metavar="N,N,...",
        help="with --artime-margins: choose the probation too, jointly (fixed lengths, as a "
        "stream must)",
    )
    parser.add_argument(
        "--artime-max-categories",
        type=int,
        default=DEFAULT_MAX_CATEGORIES,
        metavar="N",
        help="artime, artime_learnt: categories kept per key, the least recently best dropped "
        f"past it (default {DEFAULT_MAX_CATEGORIES}, for the 64 KB state budget; 0: all, as "
        "ARTime does)",
    )
    parser.add_argument(
        "--zscore-windows",
        metavar="N,N,...",
        help="also choose Beam's z-score window (and input, --zscore-inputs) leave-one-group-"
        "out, jointly with each scorer's setting; an empty --detectors runs only this",
    )
    parser.add_argument(
        "--zscore-inputs",
        default="value",
        metavar="value,diff",
        help="the z-score variants' inputs: the value, and/or its change from the previous "
        "value (default: value)",
    )
    parser.set_defaults(handler=_handle)


# -- flinkai bench suite -------------------------------------------------------------------


def pick_series(keys: Sequence[str], count: int | None) -> list[str]:
    """``count`` series spread evenly over the sorted keys: the middle of each stride.

    NAB's files sort by group, so the picks come from different groups.
    """
    ordered = sorted(keys)
    if count is None or count >= len(ordered):
        return ordered
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    step = len(ordered) / count
    return [ordered[int((i + 0.5) * step)] for i in range(count)]


def _suite_run(series: int | None) -> EntryOutput:
    """The suite's anomaly entry: every detector on ``series`` NAB series (all when None)."""
    data_dir = default_data_dir()
    data = load_nab_folder(data_dir)
    data = {k: data[k] for k in pick_series(list(data), series)}
    points = sum(len(s.values) for s in data.values())
    rows: list[dict[str, Any]] = []
    # zscore_operator: the operator's default (model 'zscore'), through its own per-key code;
    # cad_operator / cad_learnt_operator: its model 'cad', with each series' own range / none.
    for name in (*DETECTORS, *OPERATOR_DETECTORS):
        t0 = time.perf_counter()
        try:
            summary = summarize(run_detector(name, data), data)
        except SetupError as e:  # a forecaster whose model was not built
            # the error names the command that builds it; the note says it once
            rows.append({"detector": name, "NAB standard": f"n/a ({e})", "note": f"n/a ({e})"})
            continue
        overall, step, op = (
            summary["all"],
            summary["step_latency"] or {},
            summary["operator_step_latency"],
        )
        no_op = "n/a (baseline: no operator state)"
        rows.append(
            {
                "detector": name,
                "NAB standard": overall["standard"],
                "NAB lowFP": overall["reward_low_FP_rate"],
                "NAB lowFN": overall["reward_low_FN_rate"],
                "precision": overall["precision"],
                "recall": overall["recall"],
                "f1": overall["f1"],
                "step p50 ms": step.get("p50_ms"),
                "step p99 ms": step.get("p99_ms"),
                "operator step p99 ms": op["p99_ms"] if op else no_op,
                "state bytes/key": summary["state_bytes_per_key"] or no_op,
                "rejected points": summary["rejected_points"],
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    return EntryOutput(
        {"": rows},
        [
            f"{len(data)} NAB series, {points} points, from {data_dir}; thresholds optimised "
            "over these series (NAB's rule), so a subset's scores differ from the whole "
            "corpus's."
        ],
    )


#: In ``flinkai bench suite``; size = NAB series (quick 4, default and full: all 34).
suite_entry = SuiteEntry(
    name="anomaly",
    description="Streaming anomaly detectors on NAB: LSTM+attention forecaster (as the "
    "operator runs it), LSTM ablation, Beam's z-score/IQR definitions, river HST, and the "
    "operator's models as it runs them: the default (z-score + Numenta's likelihood) and CAD "
    "OSE with each series' own range and with a learnt one.",
    sizes={"quick": 4, "default": None, "full": None},
    run=_suite_run,
    chart=("detector", "NAB standard"),
)
