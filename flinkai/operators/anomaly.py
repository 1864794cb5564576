"""Anomaly detection per key as a keyed DataStream operator.

The table is converted to a DataStream, keyed by the ``key`` column, and run
through a ``KeyedProcessFunction``. Its whole per-key state is one ``ValueState``
holding the key detector's ``snapshot()``: plain data with a version tag and the
model version. By default (``model = 'zscore'``) that is Beam's z-score window
(float64 bytes) and Numenta's anomaly likelihood (its history as float64 bytes),
about 57 KB per key (:mod:`flinkai.anomaly.statistical`); with a forecaster model
it is the input normaliser, the error scorer, the LSTM state and the attention KV
cache as ``float32`` bytes, the pending forecast and the last timestamp
(:class:`~flinkai.anomaly.detector.SeriesDetector`). It is part of every checkpoint
and is rebuilt with the job's current config and model on every read; no config
object is ever pickled into state. A forecaster model (ONNX Runtime, no torch) is
loaded once per worker in ``open()``; each point costs one model step.

Used from a SQL script (the runner's ``APPLY OPERATOR`` statement)::

    CREATE TEMPORARY VIEW scored AS
      APPLY OPERATOR 'flinkai.operators.anomaly.detect_anomalies' TO points
      WITH ('key' = 'series', 'time' = 'ts_ms', 'value' = 'value');

Options:
    key: Column to key by (any type; compared as a string).
    time: Event time, epoch milliseconds (BIGINT) or a TIMESTAMP.
    value: The numeric column.
    offset, partition, payload: Optional columns carried to the output as
        ``source_offset``, ``source_partition``, ``payload_base64``, so a point
        the operator rejects reaches the dead-letter topic with its origin.
    model: ``zscore`` (the default: Beam's z-score, no model files); ``cad``
        (CAD OSE, no model files, and the default when ``value_min`` and
        ``value_max`` are given) within that known value range, or without them with
        each key's range learnt from its first values
        (:mod:`flinkai.anomaly.contextual`); or a
        forecaster: a model name under ``$FLINKAI_HOME/models/anomaly`` (``hybrid``,
        ``lstm``) or a model folder.
    threshold: ``is_anomaly`` is ``score >= threshold`` (default
        :class:`~flinkai.anomaly.detector.DetectorConfig`'s; for ``cad``,
        :data:`~flinkai.anomaly.contextual.CAD_THRESHOLD` with a range and
        :data:`~flinkai.anomaly.contextual.LEARNT_CAD_THRESHOLD` without).
    value_min, value_max: The known value range; ``cad`` only (both or neither);
        with no ``model`` they select ``cad``.
    scorer.<field>: A :class:`~flinkai.anomaly.features.ScorerConfig` field; each
        overrides that field of the default scorer
        (:data:`~flinkai.anomaly.features.STREAM_NUMENTA`: Numenta's likelihood).
        The forecasters' former scorer is ``scorer.likelihood = gaussian`` with
        ``scorer.peak_window = 100``; a forecaster with the default scorer needs
        ``scorer.numenta_history = 1500`` to stay inside 64 KB per key.

Settings resolve, lowest precedence first: the defaults, Flink options
``flinkai.anomaly.<option>`` (``SET`` or ``runtime.flink_conf``), then the
statement's options; a statement option set to the empty string is unset.

Output columns (:data:`ANOMALY_FIELDS`): ``key, ts, value, score, is_anomaly,
model_version``, then ``error_reason, error_detail`` and the carried columns. A
row with ``error_reason`` set is a dead letter, not a score:

* ``not_finite``: the value is NULL, NaN or infinite;
* ``missing_field``: the key or time is NULL;
* ``out_of_order``: the time is not after the key's last accepted time. Such a
  point is not scored and leaves the key's state unchanged (a late point cannot
  be forecast any more; rewinding the state would change later scores);
* ``internal_error``: an unexpected exception on this row (the row guard); with
  ``runtime.udf_errors: fail`` it fails the task instead.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flinkai.anomaly.detector import DetectorConfig, PointRejected
from flinkai.anomaly.features import ScorerConfig
from flinkai.anomaly.keyed import new_detector, restore_detector
from flinkai.config import coerce_value
from flinkai.errors import ConfigError
from flinkai.functions.guard import ErrorPolicy, RowGuard, internal_error_detail
from flinkai.operators.context import udf_errors

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = [
    "ANOMALY_FIELDS",
    "AnomalyOptions",
    "detect_anomalies",
    "parse_options",
    "process_point",
]

#: Columns of :func:`detect_anomalies`'s output, in order.
ANOMALY_FIELDS = (
    "key",
    "ts",
    "value",
    "score",
    "is_anomaly",
    "model_version",
    "error_reason",
    "error_detail",
    "source_partition",
    "source_offset",
    "payload_base64",
)
_REQUIRED = ("key", "time", "value")
_CARRIED = ("partition", "offset", "payload")
_SETTINGS = ("model", "threshold", "value_min", "value_max")


@dataclass(frozen=True)
class AnomalyOptions:
    """Resolved options of one ``APPLY OPERATOR`` statement.

    Attributes:
        key: Key column.
        time: Event-time column.
        value: Value column.
        carried: Optional origin columns by role (``partition``, ``offset``, ``payload``).
        detector: Detector settings.
    """

    key: str
    time: str
    value: str
    carried: Mapping[str, str]
    detector: DetectorConfig


def parse_options(
    options: Mapping[str, str], flink_conf: Mapping[str, str] | None = None
) -> AnomalyOptions:
    """Resolve an operator statement's options (see the module docstring).

    Raises:
        ConfigError: A required option is missing, an option is unknown, or a
            value is invalid.
    """
    missing = [k for k in _REQUIRED if not options.get(k)]
    if missing:
        raise ConfigError(f"missing option(s) {missing}; required: {list(_REQUIRED)}")
    known = (*_REQUIRED, *_CARRIED, *_SETTINGS)
    unknown = [k for k in options if k not in known and not k.startswith("scorer.")]
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown}; expected {list(known)} or 'scorer.<field>'"
        )
    prefix = "flinkai.anomaly."
    merged = {k[len(prefix) :]: v for k, v in (flink_conf or {}).items() if k.startswith(prefix)}
    # An empty setting is unset (a script's placeholder with an empty default), so the
    # Flink option or the default applies.
    merged.update({k: v for k, v in options.items()
                   if (k in _SETTINGS or k.startswith("scorer.")) and v != ""})  # fmt: skip
    hints = typing.get_type_hints(ScorerConfig)
    scorer_names = {f.name for f in dataclasses.fields(ScorerConfig)}
    scorer: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for name, raw in merged.items():
        if name.startswith("scorer."):
            field = name[len("scorer.") :]
            if field not in scorer_names:
                raise ConfigError(f"unknown option {name}; known: {sorted(scorer_names)}")
            scorer[field] = coerce_value(hints[field], raw, name)
        elif name in ("threshold", "value_min", "value_max"):
            settings[name] = coerce_value(float, raw, name)
        elif name == "model":
            settings["model"] = str(raw)
        else:
            raise ConfigError(f"unknown option {prefix}{name}")
    _check_range(settings)
    try:
        # Scorer fields override the default scorer's, so one field never resets the rest.
        base = DetectorConfig().scorer
        detector = DetectorConfig(scorer=dataclasses.replace(base, **scorer), **settings)
    except ValueError as e:
        raise ConfigError(f"anomaly operator: {e}") from e
    carried = {k: options[k] for k in _CARRIED if options.get(k)}
    return AnomalyOptions(options["key"], options["time"], options["value"], carried, detector)


def _check_range(settings: dict[str, Any]) -> None:
    """``cad`` takes a finite, ordered value range, or none (it learns each key's);
    other models take none. A range with no model chooses ``cad``.

    Raises:
        ConfigError: One end of the range only, a non-finite or inverted range for
            ``cad``, or a range given to another model.
    """
    from flinkai.anomaly.contextual import CAD_MODEL

    given = [k for k in ("value_min", "value_max") if k in settings]
    if given and "model" not in settings:
        # The default model follows the inputs: with a known range CAD OSE, which then
        # scores best of the operator's models; without one the z-score, which a
        # learnt-range CAD only ties (docs/anomaly.md).
        settings["model"] = CAD_MODEL
    if settings.get("model") != CAD_MODEL:
        if given:
            raise ConfigError(f"{given}: a value range is used by model '{CAD_MODEL}' only")
        return
    if not given:
        return
    if len(given) < 2:
        raise ConfigError(f"model '{CAD_MODEL}' takes both 'value_min' and 'value_max', or "
                          f"neither (the range is then learnt per key); got only {given}")  # fmt: skip
    low, high = settings["value_min"], settings["value_max"]
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        raise ConfigError(f"value range [{low}, {high}] must be finite with value_min <= value_max")


def _epoch_ms(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    return None


def process_point(
    stored: Mapping[str, Any] | None,
    row: tuple[Any, ...],
    model: Any,
    config: DetectorConfig,
) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """One input row through a key's detector, free of Flink.

    Args:
        stored: The key's snapshot, or ``None`` for a new key.
        row: ``(key, time, value, partition, offset, payload)``.
        model: The loaded model (:func:`flinkai.anomaly.keyed.open_model`).
        config: Detector settings.

    Returns:
        The output row (:data:`ANOMALY_FIELDS`) and the snapshot to store, or
        ``None`` when the state is unchanged (a rejected point).
    """
    key, raw_ts, raw_value, partition, offset, payload = row
    carried = (partition, offset, payload)
    ts = _epoch_ms(raw_ts)
    if key is None or ts is None:
        detail = "key is NULL" if key is None else f"time {raw_ts!r} is NULL or not epoch ms"
        return _dead(key, ts, raw_value, "missing_field", detail, carried), None
    if raw_value is None or isinstance(raw_value, bool):
        return _dead(key, ts, None, "not_finite", "value is NULL", carried), None
    det = new_detector(model, config) if stored is None else restore_detector(stored, model, config)
    try:
        result = det.update(ts, float(raw_value))
    except PointRejected as e:
        return _dead(key, ts, raw_value, e.reason, e.detail, carried), None
    out = (
        str(key), ts, float(raw_value), float(result.score), bool(result.is_anomaly),
        model.model_version, None, None, *carried,
    )  # fmt: skip
    return out, det.snapshot()


def _dead(
    key: Any, ts: int | None, value: Any, reason: str, detail: str, carried: tuple[Any, ...]
) -> tuple[Any, ...]:
    number = (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    )
    k = None if key is None else str(key)
    return (k, ts, number, None, None, None, reason, detail, *carried)


def _flink_conf(t_env: Any) -> dict[str, str]:
    conf = t_env.get_config().get_configuration().to_dict()
    return {str(k): str(v) for k, v in conf.items() if str(k).startswith("flinkai.anomaly.")}


def _make_process_function(opts: AnomalyOptions, udf_errors: ErrorPolicy) -> Any:
    """The ``KeyedProcessFunction``; built here so this module imports without PyFlink."""
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    from flinkai import metrics
    from flinkai.anomaly.keyed import open_model

    config = opts.detector

    class _Process(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            # Plain data (SeriesDetector.snapshot), rebuilt with this job's config and
            # model on every read: a restored job applies its own settings to every key.
            self._state = runtime_context.get_state(
                ValueStateDescriptor("flinkai-anomaly-state", Types.PICKLED_BYTE_ARRAY())
            )
            self._model = open_model(config.model, (config.value_min, config.value_max))
            group = metrics.flinkai_group(runtime_context.get_metrics_group())
            internal = group.counter(metrics.INTERNAL_ERRORS.name)
            self._guard = RowGuard("flinkai-anomaly", udf_errors, internal.inc)

        def _one(self, value: Row) -> tuple[Any, ...]:
            row = tuple(value[i] for i in range(6))
            out, snap = process_point(self._state.value(), row, self._model, config)
            if snap is not None:
                self._state.update(snap)
            return out

        def _failed(self, value: Row, exc: Exception) -> tuple[Any, ...]:
            key = value[0]
            return _dead(key, _epoch_ms(value[1]), value[2], "internal_error",
                         internal_error_detail(exc), tuple(value[i] for i in range(3, 6)))  # fmt: skip

        def process_element(self, value: Row, ctx: Any) -> Iterator[Row]:
            out = self._guard.rows([value], self._one, self._failed)
            yield Row(*out[0])

    return _Process()


def detect_anomalies(
    t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]
) -> Table:
    """Anomaly scores per point, keyed by ``key`` (columns :data:`ANOMALY_FIELDS`).

    Args:
        t_env: The script's table environment.
        table: Input with the ``key``, ``time`` and ``value`` columns (and the
            optional carried ones).
        options: The statement's options (see the module docstring).

    Returns:
        An append-only table with one row per input row: a score or a dead letter.

    Raises:
        ConfigError: Bad options or missing columns.
    """
    from pyflink.common import Types
    from pyflink.table.expressions import col, null_of
    from pyflink.table.types import DataTypes

    opts = parse_options(options, _flink_conf(t_env))
    columns = table.get_resolved_schema().get_column_names()
    wanted = [opts.key, opts.time, opts.value, *opts.carried.values()]
    absent = [c for c in wanted if c not in columns]
    if absent:
        raise ConfigError(f"column(s) {absent} not in the input; it has {columns}")
    null_types = {"partition": DataTypes.INT(), "offset": DataTypes.BIGINT(),
                  "payload": DataTypes.STRING()}  # fmt: skip
    carried = [
        col(opts.carried[r]) if r in opts.carried else null_of(null_types[r]) for r in _CARRIED
    ]
    # Only these columns cross into Python: less to serialise per row.
    rows = t_env.to_data_stream(
        table.select(
            col(opts.key), col(opts.time), col(opts.value).cast(DataTypes.DOUBLE()), *carried
        )
    )
    types = [
        Types.STRING(), Types.LONG(), Types.DOUBLE(), Types.DOUBLE(), Types.BOOLEAN(),
        Types.STRING(), Types.STRING(), Types.STRING(), Types.INT(), Types.LONG(),
        Types.STRING(),
    ]  # fmt: skip
    out = (
        rows.key_by(lambda r: str(r[0]), key_type=Types.STRING())
        .process(
            _make_process_function(opts, udf_errors(t_env)),
            output_type=Types.ROW_NAMED(list(ANOMALY_FIELDS), types),
        )
        .name("flinkai-anomaly")
    )
    return t_env.from_data_stream(out)
