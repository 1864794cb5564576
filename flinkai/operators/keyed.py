"""The wiring of a keyed Python operator over raw records: key on the JVM side, then process.

Both keyed operators that validate raw bytes themselves (risk decisions, LLM
completion) take rows ``(key, Row(key, payload, partition, offset))``. The key is set
by Flink's own ``KeyByKeySelector`` on the JVM side: PyFlink's ``key_by`` would add a
Python operator in front of the exchange just to compute it, a second round trip
through a Python worker for every event (``flinkai bench agents --floor`` measures
both).

**Restore ticks.** On this PyFlink (2.2), processing-time timers registered by a Python
``KeyedProcessFunction`` do not fire after a restore: the task's ``numFiredTimers``
stays 0 (measured on the LLM job after a TaskManager kill), so a key whose work waits
in state is not woken until a new record of that key arrives, and with no more input
it never is. When the job can restore (checkpointing on, restarts allowed, input not
a bounded scan), an operator that names its keys gets a tick per key about every
second from a ``datagen`` source, merged into its input: a row with ``tick`` true, which wakes the key (resumes
what its state holds, re-arms its timer) and emits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flinkai.errors import ConfigError

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = ["TICK_MS", "can_restore", "keyed_records", "positive_option", "resolve_options"]

#: About how often each named key gets a restore tick.
TICK_MS = 1000


def resolve_options(
    options: Mapping[str, str], required: Sequence[str], optional: Sequence[str]
) -> dict[str, str | None]:
    """An operator statement's options by name (None where not given, or empty).

    Raises:
        ConfigError: A required option is missing or an option is unknown.
    """
    missing = [k for k in required if not options.get(k)]
    if missing:
        raise ConfigError(f"missing option(s) {missing}; required: {list(required)}")
    unknown = [k for k in options if k not in (*required, *optional)]
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; expected {[*required, *optional]}")
    return {k: options.get(k) or None for k in (*required, *optional)}


def positive_option(
    name: str, text: str, kind: type[int] | type[float] = int, at_most: float | None = None
) -> Any:
    """An option's value as a positive ``kind``, at most ``at_most`` if given.

    Raises:
        ConfigError: The text is not such a number; the message names the option.
    """
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or (at_most is not None and value > at_most):
        what = "a positive integer" if kind is int else "a positive number"
        bound = "" if at_most is None else f" at most {at_most:g}"
        raise ConfigError(f"option {name!r} is {text!r}; expected {what}{bound}")
    return value


def keyed_records(
    t_env: StreamTableEnvironment,
    table: Table,
    key: str,
    payload: str,
    partition: str | None,
    offset: str | None,
    tick_keys: Sequence[str] = (),
) -> Any:
    """``table`` as a KeyedStream of ``Row(key, payload, partition, offset, tick)``, by ``key``.

    The payload stays BYTES (raw) or STRING (base64), as the input has it. ``tick`` is
    false on every input row; with ``tick_keys``, and when the job can restore
    (:func:`can_restore`), rows with ``tick`` true (and no payload) are merged in for
    each of those keys (the module docstring says why).

    Raises:
        ConfigError: Missing columns.
    """
    from pyflink.common import Types
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway
    from pyflink.table.expressions import col, lit, null_of, row
    from pyflink.table.types import DataTypes, VarCharType

    schema = table.get_resolved_schema()
    columns = schema.get_column_names()
    wanted = [c for c in (key, payload, partition, offset) if c]
    absent = [c for c in wanted if c not in columns]
    if absent:
        raise ConfigError(f"column(s) {absent} not in the input; it has {columns}")
    int_, bigint = DataTypes.INT(), DataTypes.BIGINT()
    part = col(partition).cast(int_) if partition else null_of(int_)
    off = col(offset).cast(bigint) if offset else null_of(bigint)
    key_col = col(key).cast(DataTypes.STRING())
    is_text = isinstance(schema.get_column_data_types()[columns.index(payload)], VarCharType)
    data = col(payload).cast(DataTypes.STRING() if is_text else DataTypes.BYTES())
    value_type = Types.ROW([Types.STRING(),
                            Types.STRING() if is_text else Types.PRIMITIVE_ARRAY(Types.BYTE()),
                            Types.INT(), Types.LONG(), Types.BOOLEAN()])  # fmt: skip
    shaped = table.select(key_col, row(key_col, data, part, off, lit(False))).alias("k", "v")
    if tick_keys and can_restore(t_env):
        payload_type = DataTypes.STRING() if is_text else DataTypes.BYTES()
        shaped = shaped.union_all(_ticks(t_env, tick_keys, payload_type))
    rows = t_env.to_append_stream(shaped, Types.ROW([Types.STRING(), value_type]))
    return KeyedStream(
        rows._j_data_stream.keyBy(
            get_gateway().jvm.KeyByKeySelector(),
            Types.ROW([Types.STRING()]).get_java_type_info(),
        ),
        value_type,
        rows,
    )


def can_restore(t_env: StreamTableEnvironment) -> bool:
    """Whether the job checkpoints, may restart and reads unbounded input.

    Only such a job can restore state and then wait for input forever. A bounded scan
    (the runner sets ``BOUNDED_INPUT_KEY``) gets no ticks: an unbounded tick source would
    keep it from finishing.
    """
    from flinkai.runtime.environment import BOUNDED_INPUT_KEY

    conf = t_env.get_config()
    if str(conf.get(BOUNDED_INPUT_KEY, "") or "").lower() == "true":
        return False
    interval = str(conf.get("execution.checkpointing.interval", "") or "").replace(" ", "")
    kind = str(conf.get("restart-strategy.type", "") or "").strip().lower()
    attempts = str(conf.get("restart-strategy.fixed-delay.attempts", "") or "").strip()
    if interval in ("", "0", "0ms") or kind in ("none", "off", "disable"):
        return False
    return not (kind == "fixed-delay" and attempts == "0")


def _ticks(t_env: StreamTableEnvironment, keys: Sequence[str], payload_type: Any) -> Table:
    """A tick row per key about every :data:`TICK_MS`, shaped as :func:`keyed_records`' rows.

    A random key each row at twice the needed rate: each key is woken within a few
    seconds (missed for 3 s with probability e^-6) with no state in the source.
    """
    from pyflink.table import Schema, TableDescriptor
    from pyflink.table.expressions import array, col, lit, null_of, row
    from pyflink.table.types import DataTypes

    rate = max(1, round(2 * len(keys) * 1000 / TICK_MS))
    source = t_env.from_descriptor(
        TableDescriptor.for_connector("datagen")
        .schema(Schema.new_builder().column("n", DataTypes.INT()).build())
        .option("rows-per-second", str(rate))
        .option("fields.n.kind", "random")
        .option("fields.n.min", "0")
        .option("fields.n.max", str(len(keys) - 1))
        .build()
    )
    key = array(*[lit(str(k)) for k in keys]).at(col("n") + 1)
    int_, bigint = DataTypes.INT(), DataTypes.BIGINT()
    value = row(key, null_of(payload_type), null_of(int_), null_of(bigint), lit(True))
    return source.select(key, value).alias("k", "v")
