"""``flinkai bench drift``: drift detectors on AG News topic-shift streams.

Every detector sees the same streams: abrupt, gradual and no-shift, for each
seed (see :mod:`flinkai_bench.research.drift.streams`), with the same cached embeddings. The
scoring, for each stream with a change:

* The first detection in ``[change_start_s, change_end_s + tolerance_s]`` is a
  true positive. Its delay is measured from ``change_start_s``; for a gradual
  shift that is the start of the ramp.
* Every other detection is a false alarm: before the change, after the window,
  or a second detection inside the window.
* On no-shift streams every detection is a false alarm.

Precision, recall and F1 are per detector and shift type. The ``all`` row pools
every stream, so false alarms on the no-shift control lower its precision.

Embeddings are computed once per (texts, model) and cached as ``.npy`` under
``$FLINKAI_HOME/cache/``. The ONNX backend is used when its artifacts exist
(``flinkai model export``); otherwise the packaged sentence-transformers model
is used. Both produce the same L2-normalised 384-dim vectors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np

from flinkai.backends.base import EmbeddingBackend
from flinkai.config import Config, DriftConfig, load_config
from flinkai.drift.sequential import CusumConfig
from flinkai.errors import FlinkAIError, SetupError
from flinkai.paths import cache_root
from flinkai_bench.research.drift.baselines import (
    JSDWindowDetector,
    RiverDetector,
    RiverParams,
    SequentialDetector,
    StreamDetector,
    fixed_window_config,
    plain_config,
    require_river,
)
from flinkai_bench.research.drift.streams import DriftStream, ShiftType, StreamSpec, build_streams
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = [
    "DETECTORS",
    "DetectorSpec",
    "DriftBenchResult",
    "GroupScore",
    "LongNoneScore",
    "StreamScore",
    "cached_embeddings",
    "format_long_none",
    "format_table",
    "register",
    "run_drift_bench",
    "run_long_none",
    "score_stream",
    "suite_entry",
    "summarize",
]

log = logging.getLogger(__name__)

BackendChoice = Literal["auto", "onnx", "sentence_transformers"]

SHIFTS: tuple[ShiftType, ...] = ("abrupt", "gradual", "none")


@dataclass(frozen=True)
class DetectorSpec:
    """A named detector factory, with a one-line description for the output."""

    name: str
    description: str
    factory: Callable[[], StreamDetector]


def _jsd(name: str, cfg: DriftConfig) -> Callable[[], StreamDetector]:
    return lambda: JSDWindowDetector(name, cfg)


def _cusum(name: str, cfg: CusumConfig) -> Callable[[], StreamDetector]:
    return lambda: SequentialDetector(name, cfg)


def _river(name: str, spec: RiverParams) -> Callable[[], StreamDetector]:
    return lambda: RiverDetector(name, spec)


# The "-cal" river variants use the most sensitive value, on a grid, that raised
# no false alarm on 40 no-shift calibration streams (seeds 100-139), which are
# disjoint from the default evaluation seeds. Grids: ADWIN delta in
# {0.002, 0.01, 0.05, 0.1, 0.2}; Page-Hinkley threshold in
# {1, 2, 3, 5, 8, 10, 12, 15, 50}. river's defaults suit larger-valued data than
# distances around 0.75 +- 0.09.
_ADWIN_CAL = RiverParams("adwin", {"delta": 0.1})
_PH_CAL = RiverParams("page_hinkley", {"threshold": 10.0})

#: Every detector the benchmark knows, in output order.
DETECTORS: dict[str, DetectorSpec] = {
    spec.name: spec
    for spec in (
        DetectorSpec(
            "jsd-30s",
            "flinkai JSDDriftDetector, defaults (30 s periods, 5 s checkpoints)",
            _jsd("jsd-30s", DriftConfig()),
        ),
        DetectorSpec(
            "cusum",
            "flinkai CusumDriftDetector, defaults: decides at every event, two CUSUM charts "
            f"calibrated to an ARL of {CusumConfig().arl_events:,.0f} events",
            _cusum("cusum", CusumConfig()),
        ),
        DetectorSpec(
            "fixed-10s",
            "same method on fixed 10 s windows, tested once per window",
            _jsd("fixed-10s", fixed_window_config()),
        ),
        DetectorSpec(
            "plain-30s",
            "the recipe taken literally: previous 30 s period, raw JSD z-score",
            _jsd("plain-30s", plain_config()),
        ),
        DetectorSpec(
            "adwin",
            "river ADWIN, defaults, on distance to running centroid",
            _river("adwin", RiverParams("adwin")),
        ),
        DetectorSpec(
            "page-hinkley",
            "river PageHinkley, defaults, on the same distance",
            _river("page-hinkley", RiverParams("page_hinkley")),
        ),
        DetectorSpec(
            "adwin-cal",
            f"river ADWIN, calibrated {dict(_ADWIN_CAL.params)}",
            _river("adwin-cal", _ADWIN_CAL),
        ),
        DetectorSpec(
            "page-hinkley-cal",
            f"river PageHinkley, calibrated {dict(_PH_CAL.params)}",
            _river("page-hinkley-cal", _PH_CAL),
        ),
    )
}


@dataclass(frozen=True)
class StreamScore:
    """One detector on one stream.

    Attributes:
        detector: Detector name.
        shift: Shift type of the stream.
        seed: Seed of the stream.
        change_start_s: Ground-truth change point (``None`` on no-shift streams).
        change_end_s: End of the transition.
        detections_s: Every detection time (event time, seconds).
        hit_s: The true-positive detection, if any.
        delay_ms: ``hit_s - change_start_s`` in milliseconds, if detected.
        false_alarms: Detections that are not the true positive.
    """

    detector: str
    shift: ShiftType
    seed: int
    change_start_s: float | None
    change_end_s: float | None
    detections_s: tuple[float, ...]
    hit_s: float | None
    delay_ms: float | None
    false_alarms: int


@dataclass(frozen=True)
class GroupScore:
    """Aggregate of one detector over one shift type (or ``all``).

    ``precision`` is ``None`` when there were no detections; ``recall`` and
    ``f1`` are ``None`` when the group has no changes (the no-shift control).
    """

    detector: str
    shift: str
    streams: int
    changes: int
    true_positives: int
    false_alarms: int
    precision: float | None
    recall: float | None
    f1: float | None
    median_delay_ms: float | None


@dataclass(frozen=True)
class LongNoneScore:
    """One detector on one long no-shift stream: every detection is a false alarm.

    Attributes:
        detector: Detector name.
        seed: Seed of the stream.
        hours: Event-time length of the stream.
        events: Events in it.
        false_alarms: Detections.
        false_alarms_per_hour: ``false_alarms / hours``.
        detections_s: Their event times.
    """

    detector: str
    seed: int
    hours: float
    events: int
    false_alarms: int
    false_alarms_per_hour: float
    detections_s: tuple[float, ...]


@dataclass
class DriftBenchResult:
    """Everything one benchmark run measured, plus how it was set up."""

    setup: dict[str, Any]
    groups: list[GroupScore] = field(default_factory=list)
    streams: list[StreamScore] = field(default_factory=list)
    long_none: list[LongNoneScore] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {
                "setup": self.setup,
                "groups": [asdict(g) for g in self.groups],
                "streams": [asdict(s) for s in self.streams],
                "long_none": [asdict(s) for s in self.long_none],
            },
            indent=2,
        )


def score_stream(
    detections_s: Sequence[float],
    change_start_s: float | None,
    change_end_s: float | None,
    tolerance_s: float,
) -> tuple[float | None, int]:
    """Match detections with the ground truth of one stream.

    Args:
        detections_s: Detection times, ascending.
        change_start_s: Change point, or ``None`` when the stream has no change.
        change_end_s: End of the transition (equal to the start when abrupt).
        tolerance_s: How long after ``change_end_s`` a detection still counts.

    Returns:
        ``(hit time or None, number of false alarms)``.
    """
    if change_start_s is None:
        return None, len(detections_s)
    end = (change_start_s if change_end_s is None else change_end_s) + tolerance_s
    hit: float | None = None
    false_alarms = 0
    for t in detections_s:
        if hit is None and change_start_s <= t <= end:
            hit = t
        else:
            false_alarms += 1
    return hit, false_alarms


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize(scores: Sequence[StreamScore], detectors: Sequence[str]) -> list[GroupScore]:
    """Aggregate stream scores per detector and shift type, plus an ``all`` row."""
    out: list[GroupScore] = []
    for name in detectors:
        mine = [s for s in scores if s.detector == name]
        shifts = [sh for sh in SHIFTS if any(s.shift == sh for s in mine)]
        for shift in [*shifts, "all"]:
            group = mine if shift == "all" else [s for s in mine if s.shift == shift]
            changes = sum(s.change_start_s is not None for s in group)
            tp = sum(s.hit_s is not None for s in group)
            fa = sum(s.false_alarms for s in group)
            precision = _ratio(tp, tp + fa)
            recall = _ratio(tp, changes)
            f1: float | None = None
            if recall is not None:
                p = precision or 0.0
                f1 = 2 * p * recall / (p + recall) if p + recall > 0 else 0.0
            delays = [s.delay_ms for s in group if s.delay_ms is not None]
            out.append(
                GroupScore(
                    detector=name,
                    shift=shift,
                    streams=len(group),
                    changes=changes,
                    true_positives=tp,
                    false_alarms=fa,
                    precision=precision,
                    recall=recall,
                    f1=f1,
                    median_delay_ms=statistics.median(delays) if delays else None,
                )
            )
    return out


def run_detector(
    spec: DetectorSpec, stream: DriftStream, vectors: np.ndarray, tolerance_s: float
) -> StreamScore:
    """Feed one stream to a fresh detector and score it."""
    detector = spec.factory()
    detections: list[float] = []
    for t, row in zip(stream.event_time_s.tolist(), stream.doc_index.tolist(), strict=True):
        found = detector.update(vectors[row], t)
        if found is not None:
            detections.append(found)
    if len(stream):
        found = detector.finish(float(stream.event_time_s[-1]))
        if found is not None:
            detections.append(found)
    hit, false_alarms = score_stream(
        detections, stream.change_start_s, stream.change_end_s, tolerance_s
    )
    delay = None if hit is None or stream.change_start_s is None else hit - stream.change_start_s
    return StreamScore(
        detector=spec.name,
        shift=stream.spec.shift,
        seed=stream.spec.seed,
        change_start_s=stream.change_start_s,
        change_end_s=stream.change_end_s,
        detections_s=tuple(detections),
        hit_s=hit,
        delay_ms=None if delay is None else delay * 1000.0,
        false_alarms=false_alarms,
    )


def run_drift_bench(
    labels: np.ndarray,
    vectors: np.ndarray,
    seeds: Sequence[int],
    detectors: Sequence[str] = tuple(DETECTORS),
    tolerance_s: float = 120.0,
    base: StreamSpec | None = None,
    progress: TextIO | None = None,
) -> DriftBenchResult:
    """Run detectors on every shift type x seed and score them.

    Args:
        labels: Class of each corpus row.
        vectors: Embedding of each corpus row.
        seeds: Stream seeds.
        detectors: Names from :data:`DETECTORS`.
        tolerance_s: Detections up to this long after the change end are on time.
        base: Stream template (shift and seed are replaced).
        progress: Where to print one line per detector; ``None`` for silence.

    Returns:
        Per-stream scores and the aggregates.

    Raises:
        ValueError: An unknown detector name, or labels and vectors of different length.
    """
    unknown = [d for d in detectors if d not in DETECTORS]
    if unknown:
        raise ValueError(f"unknown detector(s) {unknown}; known: {list(DETECTORS)}")
    if len(labels) != len(vectors):
        raise ValueError(f"{len(labels)} labels but {len(vectors)} vectors")
    template = base or StreamSpec(shift="none")
    streams = build_streams(labels, seeds, SHIFTS, template)
    result = DriftBenchResult(
        setup={
            "seeds": list(seeds),
            "tolerance_s": tolerance_s,
            "stream": {k: v for k, v in asdict(template).items() if k not in ("shift", "seed")},
            "events_per_stream_mean": float(np.mean([len(s) for s in streams])),
            "detectors": {d: DETECTORS[d].description for d in detectors},
        }
    )
    for i, name in enumerate(detectors, start=1):
        t0 = time.perf_counter()
        for stream in streams:
            result.streams.append(run_detector(DETECTORS[name], stream, vectors, tolerance_s))
        if progress is not None:
            print(
                f"[{i}/{len(detectors)}] {name}: {len(streams)} streams in "
                f"{time.perf_counter() - t0:.1f} s",
                file=progress,
                flush=True,
            )
    result.groups = summarize(result.streams, detectors)
    return result


def run_long_none(
    labels: np.ndarray,
    vectors: np.ndarray,
    seeds: Sequence[int],
    hours: float,
    detectors: Sequence[str],
    base: StreamSpec | None = None,
    progress: TextIO | None = None,
) -> list[LongNoneScore]:
    """False alarms per hour: each detector on one long no-shift stream per seed.

    Args:
        labels: Class of each corpus row.
        vectors: Embedding of each corpus row.
        seeds: One stream per seed.
        hours: Event-time length of each stream.
        detectors: Names from :data:`DETECTORS`.
        base: Stream template (rates, mix); shift, seed and duration are replaced.
        progress: Where to print one line per detector; ``None`` for silence.
    """
    template = replace(base or StreamSpec(shift="none"), duration_s=hours * 3600.0)
    streams = build_streams(labels, seeds, ("none",), template)
    out: list[LongNoneScore] = []
    for name in detectors:
        t0 = time.perf_counter()
        for stream in streams:
            score = run_detector(DETECTORS[name], stream, vectors, 0.0)
            out.append(
                LongNoneScore(
                    detector=name,
                    seed=stream.spec.seed,
                    hours=hours,
                    events=len(stream),
                    false_alarms=score.false_alarms,
                    false_alarms_per_hour=score.false_alarms / hours,
                    detections_s=score.detections_s,
                )
            )
        if progress is not None:
            print(
                f"long no-shift: {name}: {len(streams)} x {hours:g} h in "
                f"{time.perf_counter() - t0:.1f} s",
                file=progress,
                flush=True,
            )
    return out


def format_long_none(scores: Sequence[LongNoneScore]) -> str:
    """False alarms per hour on the long no-shift streams, one line per detector."""
    lines = [f"{'detector':<17} {'streams':>7} {'hours':>7} {'events':>9} {'FA':>4} {'FA/h':>7}"]
    for name in dict.fromkeys(s.detector for s in scores):
        mine = [s for s in scores if s.detector == name]
        hours = sum(s.hours for s in mine)
        fa = sum(s.false_alarms for s in mine)
        lines.append(
            f"{name:<17} {len(mine):>7} {hours:>7.0f} {sum(s.events for s in mine):>9,} "
            f"{fa:>4} {fa / hours:>7.4f}"
        )
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def format_table(result: DriftBenchResult) -> str:
    """The aggregates as a fixed-width text table."""
    setup = result.setup
    head = (
        f"{'detector':<17} {'shift':<8} {'streams':>7} {'changes':>7} {'TP':>4} {'FA':>4} "
        f"{'precision':>9} {'recall':>6} {'F1':>5} {'median delay ms':>15}"
    )
    lines = [
        f"Drift detection on AG News topic shifts: {len(setup['seeds'])} seeds x "
        f"{'/'.join(SHIFTS)}; a detection is on time within "
        f"[change start, change end + {setup['tolerance_s']:g} s]",
        head,
        "-" * len(head),
    ]
    previous = None
    for g in result.groups:
        if previous is not None and g.detector != previous:
            lines.append("")
        previous = g.detector
        lines.append(
            f"{g.detector:<17} {g.shift:<8} {g.streams:>7} {g.changes:>7} "
            f"{g.true_positives:>4} {g.false_alarms:>4} {_fmt(g.precision, '.2f'):>9} "
            f"{_fmt(g.recall, '.2f'):>6} {_fmt(g.f1, '.2f'):>5} "
            f"{_fmt(g.median_delay_ms, ',.0f'):>15}"
        )
    return "\n".join(lines)


def _texts_digest(texts: Sequence[str], model_key: str) -> str:
    h = hashlib.sha256(model_key.encode())
    for text in texts:
        # Length-prefixed so no two different lists hash alike.
        data = text.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _make_backend(choice: BackendChoice, cfg: Config) -> EmbeddingBackend:
    """A loaded embedding backend: ONNX if possible (``auto``), else sentence-transformers."""
    if choice in ("auto", "onnx"):
        try:
            from flinkai.backends.onnx import OnnxEmbeddingBackend

            onnx_backend = OnnxEmbeddingBackend(cfg)
            onnx_backend.load()
            return onnx_backend
        except (ImportError, FlinkAIError) as e:
            if choice == "onnx":
                raise
            log.info("ONNX backend unavailable (%s); using sentence-transformers", e)
    from flinkai.backends.sentence_transformers import SentenceTransformersBackend

    st_backend = SentenceTransformersBackend(cfg)
    st_backend.load()
    return st_backend


def cached_embeddings(
    texts: Sequence[str],
    cfg: Config | None = None,
    backend: BackendChoice = "auto",
    cache_dir: Path | None = None,
    progress: TextIO | None = None,
    batch: int = 256,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Embeddings of ``texts``, computed once and cached as ``.npy``.

    The cache key hashes the texts, the model name and ``max_seq_length`` (the
    truncation changes vectors), not the backend: the ONNX export and
    sentence-transformers give the same vectors. A JSON sidecar records which
    backend and model version produced the file.

    Args:
        texts: Texts to embed.
        cfg: Model and backend settings; :func:`load_config` when omitted.
        backend: ``auto`` (ONNX if its artifacts exist), ``onnx`` or ``sentence_transformers``.
        cache_dir: Defaults to ``$FLINKAI_HOME/cache``.
        progress: Where to print progress; ``None`` for silence.
        batch: Texts per backend call between progress lines.

    Returns:
        ``(float32 [len(texts), dim] array, provenance dict)``.

    Raises:
        FlinkAIError: No backend could be loaded (the message names the missing piece).
    """
    cfg = cfg or load_config()
    model_key = f"{cfg.model.name}|max_seq_length={cfg.model.max_seq_length}"
    digest = _texts_digest(texts, model_key)
    folder = cache_dir or cache_root() / "cache"
    stem = f"embeddings-{cfg.model.name}-{digest[:16]}"
    npy, meta_path = folder / f"{stem}.npy", folder / f"{stem}.json"
    if npy.is_file() and meta_path.is_file():
        vectors = np.load(npy)
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if vectors.shape[0] == len(texts) and meta.get("sha256") == digest:
            meta["cache"] = str(npy)
            return vectors, meta
        log.warning("ignoring stale embedding cache %s", npy)

    be = _make_backend(backend, cfg)
    try:
        parts: list[np.ndarray] = []
        t0 = time.perf_counter()
        for start in range(0, len(texts), batch):
            parts.append(be.infer_batch(list(texts[start : start + batch])).outputs)
            if progress is not None:
                done = min(start + batch, len(texts))
                rate = done / max(time.perf_counter() - t0, 1e-9)
                eta = (len(texts) - done) / rate
                print(
                    f"  embedding with {be.name}: {done}/{len(texts)} texts, "
                    f"{rate:.0f} texts/s, ETA {eta:.0f} s",
                    file=progress,
                    flush=True,
                )
        vectors = np.concatenate(parts).astype(np.float32, copy=False)
        meta = {
            "sha256": digest,
            "model": model_key,
            "backend": be.name,
            "model_version": be.model_version,
            "n": len(texts),
            "dim": int(vectors.shape[1]),
        }
    finally:
        be.close()
    folder.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so a killed run never leaves a truncated cache behind.
    tmp = npy.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, npy)
    meta_path.write_text(json.dumps(meta, indent=2))
    meta["cache"] = str(npy)
    return vectors, meta


def _handle(args: argparse.Namespace) -> int:
    from flinkai.datasets import load_ag_news

    if args.seeds < 1:
        raise SetupError("--seeds must be >= 1")
    if not args.long_none_hours >= 0:
        raise SetupError("--long-none-hours must be >= 0")
    if not args.tolerance_s >= 0:
        raise SetupError("--tolerance-s must be >= 0")
    detectors = [d.strip() for d in args.detectors.split(",") if d.strip()]
    unknown = [d for d in detectors if d not in DETECTORS]
    if unknown:
        raise SetupError(f"unknown detector(s) {unknown}; known: {', '.join(DETECTORS)}")
    if any(d.startswith(("adwin", "page-hinkley")) for d in detectors):
        # Fail before minutes of embedding, not after.
        require_river()

    err = sys.stderr
    rows = load_ag_news(args.data)
    labels = np.array([label for label, _ in rows], dtype=np.int64)
    texts = [text for _, text in rows]
    print(f"AG News: {len(rows)} articles; embedding (cached after the first run)", file=err)
    cfg = load_config(args.config)
    vectors, provenance = cached_embeddings(texts, cfg, args.backend, progress=err)
    print(
        f"embeddings: {vectors.shape} from {provenance['backend']} "
        f"({provenance['model_version']}), cache {provenance['cache']}",
        file=err,
    )
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    result = run_drift_bench(
        labels, vectors, seeds, detectors, tolerance_s=args.tolerance_s, progress=err
    )
    result.setup["embeddings"] = provenance
    if args.long_none_hours > 0:
        result.long_none = run_long_none(
            labels, vectors, seeds, args.long_none_hours, detectors, progress=err
        )
        result.setup["long_none_hours"] = args.long_none_hours
    print(format_table(result))
    if result.long_none:
        print(
            f"\nNo-shift streams of {args.long_none_hours:g} h (every detection is a false alarm)"
        )
        print(format_long_none(result.long_none))
    print()
    for name in detectors:
        print(f"  {name:<17} {DETECTORS[name].description}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.to_json())
        print(f"\nwrote {path}", file=err)
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench drift``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "drift",
        help="drift detectors on AG News topic-shift streams",
        description="Drift detectors on AG News topic-shift streams; see benchmarks/README.md.",
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds per shift type (10)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first seed; seeds are consecutive (0)"
    )
    parser.add_argument(
        "--tolerance-s",
        type=float,
        default=120.0,
        help="a detection counts up to this long after the change ends (120)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--long-none-hours",
        type=float,
        default=0.0,
        metavar="H",
        help="also run each detector on one no-shift stream of H hours per seed and "
        "report false alarms per hour (0: off)",
    )
    parser.add_argument(
        "--detectors",
        default=",".join(DETECTORS),
        help=f"comma-separated subset of: {', '.join(DETECTORS)}",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "onnx", "sentence_transformers"),
        default="auto",
        help="embedding backend for the one-off embedding run (auto: ONNX if exported)",
    )
    parser.add_argument(
        "--data", metavar="CSV", help="AG News news.csv (default: the shared datasets folder)"
    )
    parser.set_defaults(handler=_handle)


# -- flinkai bench suite -------------------------------------------------------------------

_WHY = {
    "precision": "n/a (no detections)",
    "recall": "n/a (no change in the no-shift control)",
    "f1": "n/a (no change in the no-shift control)",
    "median_delay_ms": "n/a (nothing detected in time)",
}


def _suite_run(seeds: int | None) -> EntryOutput:
    """The suite's drift entry: every detector on ``seeds`` seeds x 3 shift types."""
    from flinkai.datasets import load_ag_news

    rows = load_ag_news()
    labels = np.array([label for label, _ in rows], dtype=np.int64)
    vectors, provenance = cached_embeddings([text for _, text in rows], load_config())
    result = run_drift_bench(labels, vectors, list(range(seeds or 30)))

    def row(g: GroupScore) -> dict[str, Any]:
        data = asdict(g)
        return {k: (_WHY[k] if v is None and k in _WHY else v) for k, v in data.items()}

    pooled = [row(g) for g in result.groups if g.shift == "all"]
    per_shift = [row(g) for g in result.groups if g.shift != "all"]
    return EntryOutput(
        {"all streams pooled": pooled, "per shift type": per_shift},
        [
            f"{len(result.setup['seeds'])} seed(s) x {len(SHIFTS)} shift types "
            f"(abrupt, gradual, none), "
            f"{result.setup['events_per_stream_mean']:.0f} events per stream on average; "
            f"tolerance {result.setup['tolerance_s']:.0f} s after the change ends. Embeddings "
            f"from {provenance['backend']} ({provenance['model_version']}), cached.",
        ],
    )


#: In ``flinkai bench suite``; size = seeds per shift type (quick 2, default 10, full 30).
suite_entry = SuiteEntry(
    name="drift",
    description="Drift detectors on AG News topic-shift streams: precision, recall, F1, "
    "median delay (JSD windows vs river ADWIN / Page-Hinkley).",
    sizes={"quick": 2, "default": 10, "full": 30},
    run=_suite_run,
    chart=("detector", "f1"),
)
