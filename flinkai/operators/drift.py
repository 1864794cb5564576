"""Drift detection and adaptive micro-batch windows as keyed DataStream operators.

A drift detector compares each period with earlier ones, so it needs state that
lives across periods and survives restarts. SQL UDF state is not checkpointed,
hence these operators: the table is converted to a DataStream, keyed by the
``key`` column, and run through a ``KeyedProcessFunction`` whose whole per-key
state (the :class:`~flinkai.drift.detector.JSDDriftDetector` and the open window)
is one ``ValueState`` of plain data (:meth:`KeyState.snapshot`), so it is part of
every checkpoint and is rebuilt with the current config after a restore.

Used from a SQL script (the runner's ``APPLY OPERATOR`` statement)::

    CREATE TEMPORARY VIEW drift_events AS
      APPLY OPERATOR 'flinkai.operators.drift.detect_drift' TO embedded
      WITH ('key' = 'stream_id', 'time' = 'event_ms', 'embedding' = 'embedding');

Options:
    key: Column to key by (any type; compared as a string).
    time: Event-time column, epoch milliseconds (BIGINT) or a TIMESTAMP.
    embedding: ``ARRAY<FLOAT>`` (or DOUBLE) column.
    detector: ``jsd`` (default, :class:`~flinkai.drift.detector.JSDDriftDetector`,
        decides at period ends and checkpoints) or ``cusum``
        (:class:`~flinkai.drift.sequential.CusumDriftDetector`, decides at every event).
    drift.<field>: A :class:`~flinkai.drift.detector.DriftConfig` field, e.g.
        ``'drift.period_s' = '5'`` (``jsd``).
    cusum.<field>: A :class:`~flinkai.drift.sequential.CusumConfig` field, e.g.
        ``'cusum.arl_events' = '100000'`` (``cusum``).
    window.<field>: An :class:`~flinkai.functions.adaptive_window.AdaptiveWindowConfig`
        field, e.g. ``'window.base_ms' = '2000'`` (``adaptive_windows`` only).

Settings resolve, lowest precedence first: the dataclass defaults, a ``drift`` /
``adaptive_window`` section of the flinkai config when it has one, Flink options
``flinkai.drift.<field>`` / ``flinkai.cusum.<field>`` /
``flinkai.adaptive_window.<field>`` and ``flinkai.drift_detector`` (``SET`` or
``runtime.flink_conf``), then the statement's options.

Metrics per key (a ``key`` label; Flink's reporter puts the label's key in the name,
so they export as ``key_drift_score_milli{key=...}`` and ``key_drift_detected_total``):
the detector's score (the largest z-score of the last test for ``jsd``; chart over
threshold for ``cusum``, 1000 at an alarm) and the count of drift events. Each key is
one series: keep keys few (streams or topics, not users).

Time semantics:
    Drift periods follow **event time** from the ``time`` column, fed to the
    detector event by event (a period closes when a later event of the same key
    arrives; the detector's early checks fire within the open period). No
    watermarks are needed, so a source without a rowtime attribute works.

    Adaptive windows are **processing time**: they exist to pace output by how
    far the job lags behind its input, which only the wall clock measures. A
    window opens with a key's first event, closes by a processing-time timer,
    and the next window's length comes from the mean processing delay (arrival
    time minus event time) of the window that closed. An empty window ends the
    chain until the key's next event. On drift the open window is emitted at once
    (``closed_by = 'drift'``), its state is reset, and a ``min_ms`` window starts,
    so no window mixes the old distribution with the new one.

End of input:
    When a bounded input ends, Flink sends a final watermark but fires no pending
    processing-time timer. Each key holds an event-time timer at that watermark,
    which closes its last drift period and emits its open window
    (``closed_by = 'end_of_input'``): no event is left out of the output.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from flinkai import metrics
from flinkai.config import AdaptiveWindowConfig, DriftConfig, coerce_value
from flinkai.drift.detector import DriftEvent, JSDDriftDetector
from flinkai.drift.sequential import CusumConfig, CusumDriftDetector
from flinkai.errors import ConfigError
from flinkai.functions.adaptive_window import AdaptiveWindowSizer
from flinkai.functions.guard import ErrorPolicy, RowGuard
from flinkai.operators.context import client_config

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = [
    "DETECTORS",
    "DRIFT_FIELDS",
    "WINDOW_FIELDS",
    "DriftRow",
    "KeyState",
    "OperatorOptions",
    "Step",
    "WindowRow",
    "adaptive_windows",
    "detect_drift",
    "parse_options",
]

#: Columns of :func:`detect_drift`'s output, in order.
DRIFT_FIELDS = ("key", "period_start_ms", "period_end_ms", "jsd", "z", "n", "detected_at_ms")
#: Columns of :func:`adaptive_windows`'s output, in order.
WINDOW_FIELDS = (
    "key",
    "window_start_ms",
    "window_end_ms",
    "n",
    "mean_norm",
    "delay_ms",
    "next_window_ms",
    "closed_by",
)

_REQUIRED = ("key", "time", "embedding")
DetectorKind = Literal["jsd", "cusum"]
#: Values of the ``detector`` option.
DETECTORS: tuple[DetectorKind, ...] = ("jsd", "cusum")
#: Event time of the final watermark a bounded input emits (Long.MAX_VALUE).
END_OF_INPUT = 2**63 - 1
C = TypeVar("C")


@dataclass(frozen=True)
class DriftRow:
    """One drift event of one key (a row of :func:`detect_drift`'s output).

    Attributes:
        key: The key, as a string.
        period_start_ms: Start of the data span that raised the alarm (event time).
        period_end_ms: End of that span; the drift is known from here on (event time).
        jsd: Jensen-Shannon divergence of the span against the reference (nats).
        z: Z-score of the statistic that fired.
        n: Events in the span.
        detected_at_ms: Processing time the drift was raised.
    """

    key: str
    period_start_ms: int
    period_end_ms: int
    jsd: float
    z: float
    n: int
    detected_at_ms: int

    @classmethod
    def of(cls, key: str, event: DriftEvent, now_ms: int) -> DriftRow:
        """From a detector event (times in seconds) at processing time ``now_ms``."""
        return cls(
            key,
            round(event.period_start_s * 1000),
            round(event.period_end_s * 1000),
            float(event.jsd),
            float(event.z),
            int(event.n),
            int(now_ms),
        )

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in DRIFT_FIELDS)


@dataclass(frozen=True)
class WindowRow:
    """One closed adaptive window of one key (a row of :func:`adaptive_windows`).

    Attributes:
        key: The key, as a string.
        window_start_ms: Processing time the window opened.
        window_end_ms: Processing time it closed.
        n: Events in the window.
        mean_norm: Mean L2 norm of their embeddings.
        delay_ms: Mean processing delay of its events (arrival minus event time).
        next_window_ms: Length chosen for the next window.
        closed_by: ``timer`` (its length ran out), ``drift`` (cut short by a drift:
            the next window starts on the new distribution) or ``end_of_input``.
    """

    key: str
    window_start_ms: int
    window_end_ms: int
    n: int
    mean_norm: float
    delay_ms: float
    next_window_ms: int
    closed_by: str = "timer"

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in WINDOW_FIELDS)


@dataclass
class _Window:
    start_ms: int
    end_ms: int
    n: int = 0
    norm_sum: float = 0.0
    delay_sum: float = 0.0


@dataclass
class Step:
    """What one call of :class:`KeyState` asks the operator to do.

    Attributes:
        drift: The drift raised by this event, if any.
        window: The window closed by this timer, if any.
        register: Processing-time timers to register.
        delete: Processing-time timers to delete.
    """

    drift: DriftRow | None = None
    window: WindowRow | None = None
    register: list[int] = field(default_factory=list)
    delete: list[int] = field(default_factory=list)


class KeyState:
    """All state of one key, and the operator logic, free of Flink.

    The ``KeyedProcessFunction`` keeps one :meth:`snapshot` per key in a
    ``ValueState`` and turns each :class:`Step` into output rows and timer calls,
    so this class is tested with plain numbers for clocks.

    Args:
        key: The key (for output rows).
        drift_cfg: Parameters of the ``jsd`` detector.
        window_cfg: Window parameters; ``None`` disables windows (no timers).
        cusum_cfg: When given, the key runs the per-event ``cusum`` detector
            with these parameters instead of the ``jsd`` one.
    """

    def __init__(
        self,
        key: str,
        drift_cfg: DriftConfig,
        window_cfg: AdaptiveWindowConfig | None = None,
        cusum_cfg: CusumConfig | None = None,
    ) -> None:
        self.key = key
        self.detector: JSDDriftDetector | CusumDriftDetector = (
            JSDDriftDetector(drift_cfg) if cusum_cfg is None else CusumDriftDetector(cusum_cfg)
        )
        self.sizer = AdaptiveWindowSizer(window_cfg) if window_cfg is not None else None
        self.window: _Window | None = None

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def snapshot(self) -> dict[str, Any]:
        """The key's state as plain data (numbers, arrays, lists) plus a version tag.

        This, not the object, is what the operator keeps in Flink state: a pickled
        object would carry its config into every checkpoint, and a job restored with
        a changed config would go on with the old one for every restored key.
        """
        return {
            "version": self.SNAPSHOT_VERSION,
            "key": self.key,
            "detector_kind": "cusum" if isinstance(self.detector, CusumDriftDetector) else "jsd",
            "detector": self.detector.snapshot(),
            "sizer": None if self.sizer is None else self.sizer.snapshot(),
            "window": None if self.window is None else dataclasses.asdict(self.window),
        }

    @classmethod
    def from_snapshot(
        cls,
        snap: Mapping[str, Any],
        drift_cfg: DriftConfig,
        window_cfg: AdaptiveWindowConfig | None = None,
        cusum_cfg: CusumConfig | None = None,
    ) -> KeyState:
        """Rebuild a key's state from a :meth:`snapshot` with the *current* config.

        A job restored with the other detector kind starts that detector afresh.

        Raises:
            ValueError: The snapshot has a layout version this code does not know.
        """
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown drift key-state version {snap.get('version')!r}")
        state = cls(str(snap["key"]), drift_cfg, window_cfg, cusum_cfg)
        kind = snap.get("detector_kind", "jsd")  # snapshots before the cusum option
        if cusum_cfg is None and kind == "jsd":
            state.detector = JSDDriftDetector.from_snapshot(snap["detector"], drift_cfg)
        elif cusum_cfg is not None and kind == "cusum":
            state.detector = CusumDriftDetector.from_snapshot(snap["detector"], cusum_cfg)
        if window_cfg is not None and snap["sizer"] is not None:
            state.sizer = AdaptiveWindowSizer.from_snapshot(snap["sizer"], window_cfg)
            if snap["window"] is not None:
                state.window = _Window(**snap["window"])
        return state

    def on_event(self, embedding: Sequence[float], event_ms: int, now_ms: int) -> Step:
        """Feed one event at processing time ``now_ms``.

        Args:
            embedding: The event's vector.
            event_ms: Its event time, epoch milliseconds.
            now_ms: Current processing time, epoch milliseconds.

        Returns:
            The drift it raised and the timers to change.

        Raises:
            ValueError: A zero, non-finite or differently sized embedding.
        """
        x = np.asarray(embedding, dtype=np.float64)
        event = self.detector.update(x, event_time_s=event_ms / 1000.0)
        step = Step()
        if event is not None:
            step.drift = DriftRow.of(self.key, event, now_ms)
        if self.sizer is None:
            return step
        if event is not None:
            # The open window holds the distribution that just ended: emit it as it
            # is (cut short, never mixed with the new one), reset, and summarise the
            # new distribution quickly with a short window.
            self.sizer.shrink()
            next_ms = self.sizer.next_window_ms(None)
            w = self.window
            if w is not None:
                step.delete.append(w.end_ms)
                self.window = None
                if w.n > 0:  # a window opened by a timer may still be empty
                    step.window = self._row(w, max(now_ms, w.start_ms), next_ms, "drift")
            self._open(now_ms, next_ms, step)
        elif self.window is None:
            self._open(now_ms, self.sizer.current_ms, step)
        assert self.window is not None
        self.window.n += 1
        self.window.norm_sum += float(np.linalg.norm(x))
        self.window.delay_sum += max(now_ms - event_ms, 0)
        return step

    def on_timer(self, timestamp_ms: int) -> Step:
        """A processing-time timer fired: close the window it belongs to.

        Args:
            timestamp_ms: The timer's time.

        Returns:
            The closed window (none for an empty one or a stale timer) and the
            next window's timer.
        """
        step = Step()
        w = self.window
        if w is None or self.sizer is None or timestamp_ms != w.end_ms:
            return step  # a timer of a window discarded on drift
        self.window = None
        if w.n == 0:
            return step
        next_ms = self.sizer.next_window_ms(w.delay_sum / w.n)
        step.window = self._row(w, w.end_ms, next_ms, "timer")
        # The next window opens now; if nothing arrives it closes empty and the
        # chain stops, so idle keys hold no timers.
        self._open(timestamp_ms, next_ms, step)
        return step

    def on_end_of_input(self, now_ms: int) -> Step:
        """The input ended (a bounded source finished): flush everything still open.

        Processing-time timers do not fire once a bounded job finishes, so without
        this the events of the open window, and a drift in the last period, would
        be lost. Emits the open window (ending now) and closes the drift period.

        Args:
            now_ms: Current processing time.

        Returns:
            The drift of the last period, if any, and the flushed window.
        """
        step = Step()
        event = self.detector.close_open_period()
        if event is not None:
            step.drift = DriftRow.of(self.key, event, now_ms)
        w = self.window
        if w is not None and self.sizer is not None:
            self.window = None
            step.delete.append(w.end_ms)
            if w.n > 0:
                next_ms = self.sizer.next_window_ms(w.delay_sum / w.n)
                step.window = self._row(w, max(now_ms, w.start_ms), next_ms, "end_of_input")
        return step

    def _row(self, w: _Window, end_ms: int, next_ms: int, closed_by: str) -> WindowRow:
        return WindowRow(
            self.key,
            w.start_ms,
            end_ms,
            w.n,
            w.norm_sum / w.n,
            w.delay_sum / w.n,
            next_ms,
            closed_by,
        )

    def _open(self, now_ms: int, length_ms: int, step: Step) -> None:
        self.window = _Window(now_ms, now_ms + length_ms)
        step.register.append(self.window.end_ms)


@dataclass(frozen=True)
class OperatorOptions:
    """Resolved options of one operator statement.

    Attributes:
        key: Key column.
        time: Event-time column.
        embedding: Embedding column.
        drift: Parameters of the ``jsd`` detector.
        window: Window parameters.
        detector: ``jsd`` or ``cusum``.
        cusum: Parameters of the ``cusum`` detector.
    """

    key: str
    time: str
    embedding: str
    drift: DriftConfig
    window: AdaptiveWindowConfig
    detector: DetectorKind = "jsd"
    cusum: CusumConfig = field(default_factory=CusumConfig)

    @property
    def cusum_cfg(self) -> CusumConfig | None:
        """The ``cusum`` parameters when that detector is chosen, else ``None``."""
        return self.cusum if self.detector == "cusum" else None


def _build(cls: type[C], base: Mapping[str, Any], overrides: Mapping[str, str], where: str) -> C:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in base.items() if k in names}
    for name, raw in overrides.items():
        if name not in names:
            raise ConfigError(f"unknown option {where}{name}; known: {sorted(names)}")
        values[name] = coerce_value(hints[name], raw, f"{where}{name}")
    return cls(**values)


def parse_options(
    options: Mapping[str, str],
    flink_conf: Mapping[str, str] | None = None,
    config: Any = None,
) -> OperatorOptions:
    """Resolve an operator statement's options (see the module docstring).

    Args:
        options: The statement's ``WITH`` options.
        flink_conf: Flink options; ``flinkai.drift.*`` and
            ``flinkai.adaptive_window.*`` entries are used.
        config: The flinkai config; its ``drift`` / ``adaptive_window``
            sections are used when it has them.

    Returns:
        The columns and the validated parameters.

    Raises:
        ConfigError: A required option is missing, an option is unknown, or a
            value is invalid.
    """
    missing = [k for k in _REQUIRED if not options.get(k)]
    if missing:
        raise ConfigError(f"missing option(s) {missing}; required: {list(_REQUIRED)}")
    unknown = [
        k
        for k in options
        if k not in (*_REQUIRED, "detector") and not k.startswith(("drift.", "window.", "cusum."))
    ]
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown}; expected {list(_REQUIRED)}, 'detector', "
            "'drift.<field>', 'cusum.<field>' or 'window.<field>'"
        )
    conf = flink_conf or {}
    detector = options.get("detector") or conf.get("flinkai.drift_detector") or "jsd"
    if detector not in DETECTORS:
        raise ConfigError(f"unknown detector {detector!r}; known: {list(DETECTORS)}")

    def section(name: str) -> dict[str, Any]:
        value = getattr(config, name, None)
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else {}  # type: ignore[arg-type]

    def layered(conf_prefix: str, opt_prefix: str) -> dict[str, str]:
        merged = {k[len(conf_prefix) :]: v for k, v in conf.items() if k.startswith(conf_prefix)}
        merged.update(
            {k[len(opt_prefix) :]: v for k, v in options.items() if k.startswith(opt_prefix)}
        )
        return merged

    drift = _build(DriftConfig, section("drift"), layered("flinkai.drift.", "drift."), "drift.")
    window = _build(
        AdaptiveWindowConfig,
        section("adaptive_window"),
        layered("flinkai.adaptive_window.", "window."),
        "window.",
    )
    cusum = _build(CusumConfig, section("cusum"), layered("flinkai.cusum.", "cusum."), "cusum.")
    return OperatorOptions(
        options["key"],
        options["time"],
        options["embedding"],
        drift,
        window,
        typing.cast(DetectorKind, detector),
        cusum,
    )


def _no_rows(_: object, __: Exception) -> list[Any]:
    return []


def _epoch_ms(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, int | float) and math.isfinite(value):
        return int(value)
    return None


def _flink_conf(t_env: Any) -> dict[str, str]:
    conf = t_env.get_config().get_configuration().to_dict()
    return {str(k): str(v) for k, v in conf.items() if str(k).startswith("flinkai.")}


def _make_process_function(
    opts: OperatorOptions, emit: Literal["drift", "windows"], udf_errors: ErrorPolicy
) -> Any:
    """The ``KeyedProcessFunction``; built here so this module imports without PyFlink."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain
    from pyflink.datastream.state import ValueStateDescriptor

    window_cfg = opts.window if emit == "windows" else None
    drift_cfg = opts.drift
    cusum_cfg = opts.cusum_cfg

    class _Process(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            # A key's state is plain data (KeyState.snapshot: arrays, numbers, a
            # version tag), rebuilt with this job's config on every read, so a job
            # restored with a changed config applies it to every restored key.
            self._state = runtime_context.get_state(
                ValueStateDescriptor("flinkai-key-state", Types.PICKLED_BYTE_ARRAY())
            )
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            self._drifts = group.counter(metrics.DRIFT_EVENTS.name)
            self._skipped = group.counter(metrics.DRIFT_SKIPPED_ROWS.name)
            # Gauges of a subtask show its latest closed period, whichever key it was.
            self._jsd = metrics.gauge(group, metrics.DRIFT_JSD)
            self._z = metrics.gauge(group, metrics.DRIFT_Z)
            self._window_ms = metrics.gauge(group, metrics.WINDOW_LENGTH_MS)
            self._key_metrics = metrics.DriftKeyMetrics(group)
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard(f"flinkai-{emit}", udf_errors, internal.inc)

        def _load(self) -> KeyState | None:
            snap = self._state.value()
            if snap is None:
                return None
            return KeyState.from_snapshot(snap, drift_cfg, window_cfg, cusum_cfg)

        def _store(self, state: KeyState) -> None:
            self._state.update(state.snapshot())

        def _apply(self, step: Step, ctx: Any) -> Iterator[Row]:
            timers = ctx.timer_service()
            for t in step.delete:
                timers.delete_processing_time_timer(t)
            for t in step.register:
                timers.register_processing_time_timer(t)
            if step.drift is not None:
                self._drifts.inc()
                self._key_metrics.detected(step.drift.key)
                if emit == "drift":
                    yield Row(*step.drift.as_tuple())
            if step.window is not None and emit == "windows":
                self._window_ms(step.window.next_window_ms)
                yield Row(*step.window.as_tuple())

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            # Rows reach this operator only after the embed step succeeded, and the
            # job's dead letters are written upstream; a row this step raises on is
            # counted (internal_errors) and logged, and the job goes on.
            out = self._guard.rows([value], lambda v: list(self._process(v, ctx)), _no_rows)
            yield from out[0]

        def _process(self, value: Row, ctx: Any) -> Iterator[Row]:
            key, event_ms, embedding = str(value[0]), _epoch_ms(value[1]), value[2]
            if event_ms is None or embedding is None or len(embedding) == 0:
                self._skipped.inc()  # rows the embedding step failed on carry no vector
                return
            stored = self._load()
            state = (
                stored if stored is not None else KeyState(key, drift_cfg, window_cfg, cusum_cfg)
            )
            if stored is None:
                # Fires only on the final watermark of a bounded input (and with the
                # key's timers it is part of checkpoints): the end-of-input flush.
                ctx.timer_service().register_event_time_timer(END_OF_INPUT)
            now = int(ctx.timer_service().current_processing_time())
            try:
                step = state.on_event(embedding, event_ms, now)
            except ValueError:
                self._skipped.inc()  # a zero vector says nothing about the distribution
                return
            self._store(state)
            self._key_metrics.score(key, state.detector.score)
            last = state.detector.last
            if last is not None:
                self._jsd(last.jsd)
                self._z(last.z)
            yield from self._apply(step, ctx)

        def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Row]:
            state = self._load()
            if state is None:
                return
            if ctx.time_domain() == TimeDomain.EVENT_TIME:
                now = int(ctx.timer_service().current_processing_time())
                step = state.on_end_of_input(now)
            else:
                step = state.on_timer(int(timestamp))
            self._store(state)
            yield from self._apply(step, ctx)

    return _Process()


def _apply(
    t_env: StreamTableEnvironment,
    table: Table,
    options: Mapping[str, str],
    emit: Literal["drift", "windows"],
) -> Table:
    from pyflink.common import Types
    from pyflink.table.expressions import col

    client = client_config(t_env)
    opts = parse_options(options, _flink_conf(t_env), client)
    udf_errors: ErrorPolicy = client.runtime.udf_errors if client is not None else "dead_letter"
    columns = table.get_resolved_schema().get_column_names()
    absent = [c for c in (opts.key, opts.time, opts.embedding) if c not in columns]
    if absent:
        raise ConfigError(f"column(s) {absent} not in the input; it has {columns}")
    # Only the three columns cross into Python: less to serialise per row.
    rows = t_env.to_data_stream(table.select(col(opts.key), col(opts.time), col(opts.embedding)))
    names: tuple[str, ...]
    if emit == "drift":
        names, types = (
            DRIFT_FIELDS,
            [
                Types.STRING(),
                Types.LONG(),
                Types.LONG(),
                Types.DOUBLE(),
                Types.DOUBLE(),
                Types.INT(),
                Types.LONG(),
            ],
        )
    else:
        names, types = (
            WINDOW_FIELDS,
            [
                Types.STRING(),
                Types.LONG(),
                Types.LONG(),
                Types.INT(),
                Types.DOUBLE(),
                Types.DOUBLE(),
                Types.LONG(),
                Types.STRING(),
            ],
        )
    out = (
        rows.key_by(lambda r: str(r[0]), key_type=Types.STRING())
        .process(
            _make_process_function(opts, emit, udf_errors),
            output_type=Types.ROW_NAMED(list(names), types),
        )
        .name(f"flinkai-{emit}")
    )
    return t_env.from_data_stream(out)


def detect_drift(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """Drift events per key (columns :data:`DRIFT_FIELDS`).

    Args:
        t_env: The script's table environment.
        table: Input with the ``key``, ``time`` and ``embedding`` columns.
        options: The statement's options (see the module docstring).

    Returns:
        An append-only table with one row per drift event.

    Raises:
        ConfigError: Bad options or missing columns.
    """
    return _apply(t_env, table, options, "drift")


def adaptive_windows(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """Adaptive processing-time window aggregates per key (columns :data:`WINDOW_FIELDS`).

    Args:
        t_env: The script's table environment.
        table: Input with the ``key``, ``time`` and ``embedding`` columns.
        options: The statement's options (see the module docstring).

    Returns:
        An append-only table with one row per closed, non-empty window.

    Raises:
        ConfigError: Bad options or missing columns.
    """
    return _apply(t_env, table, options, "windows")
