"""A sequential drift detector: two-sided-speed CUSUM on the distance to a frozen reference.

:class:`~flinkai.drift.detector.JSDDriftDetector` decides at period ends and 5 s
checkpoints. :class:`CusumDriftDetector` decides at every event, with its false-alarm
rate set by an expected run length (ARL) under "no change", as alibi-detect's online
MMD and LSDD detectors set theirs by an expected run time.

Per key, driven by event time:

1. **Reference.** The first ``reference_events`` events give a reference centroid
   (their mean direction). The next ``null_events`` events are measured against that
   frozen centroid: their cosine distances are the null sample. The centroid never
   includes the events whose distances form the null sample, so the null sample is a
   fair picture of how far a new, unchanged event lands.
2. **Statistic.** Each later event's distance ``d`` is standardised with the null
   sample's mean and std: ``z = (d - mean) / std``. The cosine distance to a centroid
   is the witness function of the linear-kernel MMD: new content that moves away from
   the reference raises it.
3. **Two CUSUM charts.** ``S = max(0, S + z - k)`` for a large allowance
   (``k_fast``, fastest on a jump of about ``2 * k_fast`` std) and a small one
   (``k_slow``, accumulating the evidence of a slow ramp). Drift is declared at the
   first event where a chart passes its threshold ``h``.
4. **Calibration by simulation.** Each chart's ``h`` is set so that the chart alone
   has an ARL of ``2 * arl_events`` events under "no change", so both together have
   about ``arl_events``. The null process is simulated from the null sample: a
   smoothed bootstrap (resampled distances plus Gaussian jitter of Silverman's
   bandwidth, which gives the tail values beyond the sample's maximum). Every
   simulated chain also re-estimates the mean and std from its own resample of the
   null sample, so the uncertainty of the reference's estimates is part of the false-
   alarm rate. Chains count alarms (restarting after each) for a grid of thresholds
   whose ARL is measurable; ``ln ARL`` is linear in ``h`` for a CUSUM in that range,
   so a weighted fit is extended to the target ARL.
5. **After a drift** the detector waits ``settle_s`` of event time (a gradual change
   may still be under way) and then builds a new reference from the events that
   follow.

:attr:`CusumDriftDetector.score` is the larger chart value over its threshold (0 to
1, and 1 at an alarm), for a gauge. State is plain data (:meth:`~CusumDriftDetector.snapshot`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from flinkai.drift.detector import DriftEvent, js_divergence
from flinkai.drift.errors import CalibrationError
from flinkai.errors import ConfigError

__all__ = [
    "Calibration",
    "CusumConfig",
    "CusumDriftDetector",
    "calibrate_threshold",
    "cusum_path",
]

log = logging.getLogger(__name__)

#: Histogram bins of the distances (for the JSD each drift event reports).
_BINS = 20
# Phases of a key's detector.
_REFERENCE, _NULL, _MONITOR, _SETTLE = "reference", "null", "monitor", "settle"


@dataclass(frozen=True)
class CusumConfig:
    """Parameters of :class:`CusumDriftDetector`.

    Attributes:
        reference_events: Events averaged into the reference centroid.
        null_events: Events after those, measured against the frozen centroid: the
            null sample the statistic is standardised and calibrated with. Its mean
            is known to about ``1 / sqrt(null_events)`` std.
        arl_events: Expected events between false alarms with no change (both
            charts together). At 2 events/s, 500,000 is about 69 hours.
        k_fast: Allowance of the fast chart, in null std units.
        k_slow: Allowance of the slow chart (gradual change), in null std units.
            A smaller one catches a ramp sooner, but its threshold grows like
            ``1 / k_slow`` and an error ``e`` (in std) in the reference's mean cuts
            the ARL by about ``exp(2 * e * h)``: the chart becomes fragile to the
            estimate the bootstrap only partly models.
        settle_s: Event time waited after a drift before the next reference starts.
        chains: Simulated chains per threshold in the calibration.
        chain_events: Events per simulated chain.
        seed: Seed of the calibration's random numbers (a drift adds its count).
    """

    reference_events: int = 100
    null_events: int = 400
    arl_events: float = 500_000.0
    k_fast: float = 1.0
    k_slow: float = 0.5
    settle_s: float = 240.0
    chains: int = 256
    chain_events: int = 3000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.reference_events < 1:
            raise ConfigError(f"cusum.reference_events must be >= 1, got {self.reference_events}")
        if self.null_events < 20:
            raise ConfigError(f"cusum.null_events must be >= 20, got {self.null_events}")
        if not self.arl_events >= 10:
            raise ConfigError(f"cusum.arl_events must be >= 10, got {self.arl_events}")
        if not (self.k_fast > 0 and self.k_slow > 0):
            raise ConfigError("cusum: k_fast and k_slow must be > 0")
        if not self.settle_s >= 0:
            raise ConfigError(f"cusum.settle_s must be >= 0, got {self.settle_s}")
        if self.chains < 16 or self.chain_events < 100:
            raise ConfigError("cusum: need chains >= 16 and chain_events >= 100")


@dataclass(frozen=True)
class Calibration:
    """A chart's threshold and how it was found.

    Attributes:
        h: The threshold.
        grid: Thresholds simulated.
        arl: Measured ARL at each (events per alarm; ``inf`` without an alarm).
        slope: Fitted ``d ln(ARL) / dh``.
    """

    h: float
    grid: tuple[float, ...]
    arl: tuple[float, ...]
    slope: float


def cusum_path(z: np.ndarray, k: float, start: float = 0.0) -> np.ndarray:
    """The CUSUM ``S_t = max(0, S_{t-1} + z_t - k)`` over a sequence, without restarts.

    Args:
        z: Standardised statistics, in order.
        k: Allowance.
        start: ``S_0``.

    Returns:
        ``S_1 .. S_n``.
    """
    out = np.empty(len(z))
    s = start
    for i, value in enumerate(np.asarray(z, dtype=np.float64)):
        s = max(0.0, s + float(value) - k)
        out[i] = s
    return out


def _normal_guess(k: float, arl: float) -> float:
    """Threshold with that ARL for N(0, 1) increments (Siegmund's approximation)."""
    # ARL ~ (exp(2kb) - 2kb - 1) / (2k^2), b = h + 1.166: solve by bisection.
    lo, hi = 0.0, 1e3
    for _ in range(100):
        b = 0.5 * (lo + hi)
        x = 2 * k * b
        value = (math.expm1(x) - x) / (2 * k * k) if x < 700 else math.inf
        lo, hi = (b, hi) if value < arl else (lo, b)
    return max(0.5 * (lo + hi) - 1.166, 0.1)


def calibrate_threshold(
    null: np.ndarray,
    k: float,
    arl_events: float,
    rng: np.random.Generator,
    chains: int = 256,
    chain_events: int = 3000,
    points: int = 6,
) -> Calibration:
    """Threshold of a CUSUM with allowance ``k`` whose ARL under "no change" is ``arl_events``.

    See step 4 of the module docstring. ``null`` holds raw (unstandardised) values.

    Raises:
        CalibrationError: Too few distinct null values, or no alarm at all on the grid.
    """
    x = np.asarray(null, dtype=np.float64)
    n = x.size
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    if n < 20 or not sd > 1e-9:
        raise CalibrationError(f"the null sample needs >= 20 values and spread; got {n}, sd {sd}")
    bandwidth = 1.06 * sd * n ** (-0.2)
    # Parameter uncertainty: chain c standardises with the mean/std of its own resample.
    resample = x[rng.integers(0, n, size=(chains, n))]
    mu_c = resample.mean(axis=1)
    sd_c = resample.std(axis=1, ddof=1)
    sd_c = np.where(sd_c > 0, sd_c, sd)
    # Thresholds whose ARL the simulation can measure: about 30 to total/20 events.
    total = chains * chain_events
    grid = np.linspace(_normal_guess(k, 30.0), _normal_guess(k, total / 20.0), points)
    s = np.zeros((points, chains))
    alarms = np.zeros(points)
    for _ in range(chain_events):
        draw = x[rng.integers(0, n, size=chains)] + bandwidth * rng.standard_normal(chains)
        s = np.maximum(s + ((draw - mu_c) / sd_c - k), 0.0)
        hit = s > grid[:, None]
        alarms += hit.sum(axis=1)
        s[hit] = 0.0
    arl = np.where(alarms > 0, total / np.maximum(alarms, 1), np.inf)
    usable = alarms >= 5
    if usable.sum() < 2:
        raise CalibrationError(f"too few simulated alarms to fit the ARL: {alarms.tolist()}")
    # Poisson counts: the variance of ln(ARL) is about 1 / alarms.
    w = alarms[usable]
    slope, intercept = np.polyfit(grid[usable], np.log(arl[usable]), 1, w=np.sqrt(w))
    if not slope > 0:
        raise CalibrationError(f"the simulated ARL does not grow with h: {arl.tolist()}")
    h = (math.log(arl_events) - intercept) / slope
    return Calibration(
        h=float(max(h, 0.0)),
        grid=tuple(float(g) for g in grid),
        arl=tuple(float(a) for a in arl),
        slope=float(slope),
    )


class CusumDriftDetector:
    """Per-event drift detector over embeddings (see the module docstring).

    Same interface as :class:`~flinkai.drift.detector.JSDDriftDetector`: feed events
    with :meth:`update`, in event-time order.

    Args:
        cfg: Parameters; the defaults when omitted.
        clock: Source of seconds, read when :meth:`update` gets no ``event_time_s``.

    Attributes:
        score: Largest chart value over its threshold after the last event (for a
            gauge; 0.0 while building the reference).
        drift_count: Drift events raised so far.
        thresholds: ``(h_fast, h_slow)`` of the current reference, once calibrated.
    """

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def __init__(
        self, cfg: CusumConfig | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self.cfg = cfg or CusumConfig()
        self._clock = clock
        self.score = 0.0
        self.drift_count = 0
        self.last = None  # no periods: kept for the operator's gauges
        self.thresholds: tuple[float, float] | None = None
        self._settle_until = -math.inf
        self._restart(_REFERENCE)

    def _restart(self, phase: str) -> None:
        self._phase = phase
        self._sum: np.ndarray | None = None
        self._n = 0
        self._centroid: np.ndarray | None = None
        self._null: list[float] = []
        self._mean = 0.0
        self._sd = 1.0
        self._null_hist = np.zeros(_BINS)
        self.thresholds = None
        # Per chart (fast, slow), as Python numbers: two values do not pay numpy's
        # per-call cost. Chart value, event time its current run began, its events.
        self._s = [0.0, 0.0]
        self._run_start = [0.0, 0.0]
        self._run_n = [0, 0]
        self._run_hist = np.zeros((2, _BINS))  # the run's distance histogram

    @property
    def phase(self) -> str:
        """``reference``, ``null``, ``monitor`` or ``settle`` (after a drift)."""
        return self._phase

    def snapshot(self) -> dict[str, Any]:
        """The detector's state as plain data (arrays, numbers, lists), without its config."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "phase": self._phase,
            "score": self.score,
            "drift_count": self.drift_count,
            "settle_until": self._settle_until,
            "sum": self._sum,
            "n": self._n,
            "centroid": self._centroid,
            "null": list(self._null),
            "mean": self._mean,
            "sd": self._sd,
            "null_hist": self._null_hist,
            "thresholds": None if self.thresholds is None else list(self.thresholds),
            "s": list(self._s),
            "run_start": list(self._run_start),
            "run_n": list(self._run_n),
            "run_hist": self._run_hist,
        }

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], cfg: CusumConfig | None = None
    ) -> CusumDriftDetector:
        """A detector with ``cfg`` and the state of a :meth:`snapshot`.

        A snapshot of another layout version starts afresh (and logs it). Thresholds
        calibrated with an earlier config are kept until the next reference.
        """
        det = cls(cfg)
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            log.warning("drift state does not fit this detector; building a new reference")
            return det
        det._phase = str(snap["phase"])
        det.score = float(snap["score"])
        det.drift_count = int(snap["drift_count"])
        det._settle_until = float(snap["settle_until"])
        det._sum = None if snap["sum"] is None else np.asarray(snap["sum"], dtype=np.float64)
        det._n = int(snap["n"])
        det._centroid = (
            None if snap["centroid"] is None else np.asarray(snap["centroid"], dtype=np.float64)
        )
        det._null = [float(v) for v in snap["null"]]
        det._mean, det._sd = float(snap["mean"]), float(snap["sd"])
        det._null_hist = np.asarray(snap["null_hist"], dtype=np.float64)
        th = snap["thresholds"]
        det.thresholds = None if th is None else (float(th[0]), float(th[1]))
        det._s = [float(v) for v in snap["s"]]
        det._run_start = [float(v) for v in snap["run_start"]]
        det._run_n = [int(v) for v in snap["run_n"]]
        det._run_hist = np.asarray(snap["run_hist"], dtype=np.float64)
        return det

    def update(self, embedding: np.ndarray, event_time_s: float | None = None) -> DriftEvent | None:
        """Add one event; decide at once.

        Args:
            embedding: The event's vector (any scale).
            event_time_s: Event time in seconds; if omitted the injected clock is read.

        Returns:
            A :class:`DriftEvent` when this event makes a chart pass its threshold.

        Raises:
            ValueError: No time and no clock; zero or non-finite embedding; a
                dimension different from the reference's.
        """
        t = self._now(event_time_s)
        x = np.asarray(embedding, dtype=np.float64).ravel()
        nx = float(np.linalg.norm(x))
        if not (nx > 0 and math.isfinite(nx)):
            raise ValueError("embedding has zero or non-finite norm")
        ref = self._sum if self._sum is not None else self._centroid
        if ref is not None and ref.shape != x.shape:
            raise ValueError(f"embedding dim changed: {ref.shape} -> {x.shape}")
        x = x / nx
        if self._phase == _SETTLE:
            if t < self._settle_until:
                return None
            self._restart(_REFERENCE)
        if self._phase == _REFERENCE:
            self._sum = x.copy() if self._sum is None else self._sum + x
            self._n += 1
            if self._n >= self.cfg.reference_events:
                norm = float(np.linalg.norm(self._sum))
                if norm > 0:
                    self._centroid = self._sum / norm
                    self._phase = _NULL
                self._sum, self._n = None, 0
            return None
        assert self._centroid is not None
        d = min(max(1.0 - float(np.dot(x, self._centroid)), 0.0), 2.0)
        b = min(int(d * _BINS / 2.0), _BINS - 1)
        if self._phase == _NULL:
            self._null.append(d)
            self._null_hist[b] += 1
            if len(self._null) >= self.cfg.null_events:
                self._calibrate()
            return None
        return self._monitor(d, b, t)

    def _calibrate(self) -> None:
        cfg = self.cfg
        null = np.asarray(self._null)
        rng = np.random.default_rng([cfg.seed, self.drift_count])
        try:
            h = tuple(
                calibrate_threshold(
                    null, k, 2 * cfg.arl_events, rng, cfg.chains, cfg.chain_events
                ).h
                for k in (cfg.k_fast, cfg.k_slow)
            )
        except CalibrationError as e:
            # Degenerate reference (e.g. one repeated text): try again on new events.
            log.warning("drift reference unusable (%s); building a new one", e)
            self._restart(_REFERENCE)
            return
        self._mean = float(null.mean())
        self._sd = float(null.std(ddof=1))
        self.thresholds = (h[0], h[1])
        self._null = []
        self._phase = _MONITOR

    def _monitor(self, d: float, b: int, t: float) -> DriftEvent | None:
        assert self.thresholds is not None
        cfg = self.cfg
        z = (d - self._mean) / self._sd
        ratio = [0.0, 0.0]
        for c, k in enumerate((cfg.k_fast, cfg.k_slow)):
            if self._s[c] <= 0:  # a chart at zero starts a new run with this event
                self._run_start[c], self._run_n[c] = t, 0
                self._run_hist[c] = 0.0
            self._s[c] = max(self._s[c] + z - k, 0.0)
            self._run_n[c] += 1
            self._run_hist[c, b] += 1
            ratio[c] = self._s[c] / self.thresholds[c]
        chart = 0 if ratio[0] >= ratio[1] else 1
        self.score = ratio[chart]
        if ratio[chart] <= 1.0:
            return None
        event = DriftEvent(
            period_start_s=float(self._run_start[chart]),
            period_end_s=t,
            jsd=js_divergence(self._run_hist[chart], self._null_hist, 0.01),
            z=float(self._s[chart]),
            n=int(self._run_n[chart]),
            significance=float(ratio[chart]),
            reference="baseline",
            statistic="cusum",
            shift=d - self._mean,
        )
        self.drift_count += 1
        self._restart(_SETTLE)
        self._settle_until = t + cfg.settle_s
        return event

    def advance_to(self, t: float) -> DriftEvent | None:
        """Event time moved on without an event: nothing to decide (per-event detector)."""
        return None

    def close_open_period(self) -> DriftEvent | None:
        """End of input: every event was decided on arrival, so nothing is open."""
        return None

    def _now(self, event_time_s: float | None) -> float:
        if event_time_s is not None:
            return float(event_time_s)
        if self._clock is None:
            raise ValueError("no event_time_s given and no clock injected")
        return float(self._clock())
