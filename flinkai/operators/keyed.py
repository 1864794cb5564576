"""The wiring of a keyed Python operator over raw records: key on the JVM side, then process.

Both keyed operators that validate raw bytes themselves (risk decisions, LLM
completion) take rows ``(key, Row(key, payload, partition, offset))``. The key is set
by Flink's own ``KeyByKeySelector`` on the JVM side: PyFlink's ``key_by`` would add a
Python operator in front of the exchange just to compute it, a second round trip
through a Python worker for every event (``flinkai bench agents --floor`` measures
both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flinkai.errors import ConfigError

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = ["keyed_records", "resolve_options"]


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


def keyed_records(
    t_env: StreamTableEnvironment,
    table: Table,
    key: str,
    payload: str,
    partition: str | None,
    offset: str | None,
) -> Any:
    """``table`` as a KeyedStream of ``Row(key, payload, partition, offset)``, keyed by ``key``.

    The payload stays BYTES (raw) or STRING (base64), as the input has it.

    Raises:
        ConfigError: Missing columns.
    """
    from pyflink.common import Types
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway
    from pyflink.table.expressions import col, null_of, row
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
                            Types.INT(), Types.LONG()])  # fmt: skip
    shaped = table.select(key_col, row(key_col, data, part, off))
    rows = t_env.to_append_stream(shaped, Types.ROW([Types.STRING(), value_type]))
    return KeyedStream(
        rows._j_data_stream.keyBy(
            get_gateway().jvm.KeyByKeySelector(),
            Types.ROW([Types.STRING()]).get_java_type_info(),
        ),
        value_type,
        rows,
    )
