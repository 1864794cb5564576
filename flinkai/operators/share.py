"""``share``: compute a view once and let every consumer read that one result.

Flink plans each ``to_data_stream`` conversion, and the script's INSERTs, on their
own. A view that two of them read, such as the embedded events feeding both a
keyed operator and a dead-letter INSERT, is then computed twice: two Kafka
readers and two model calls per event. Passing the view through a DataStream
fixes that: every later query reads the same stream, which Flink fans out.

    CREATE TEMPORARY VIEW vectorized_once AS
      APPLY OPERATOR 'flinkai.operators.share.share' TO vectorized;

The result has the same columns and types; it runs in the JVM only (no Python).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from flinkai.errors import ConfigError

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment, Table

__all__ = ["share"]


def share(t_env: StreamTableEnvironment, table: Table, options: Mapping[str, str]) -> Table:
    """``table`` as a table over one DataStream, so later queries share its computation.

    Raises:
        ConfigError: Options were given; ``share`` takes none.
    """
    if options:
        raise ConfigError(f"share takes no options, got {sorted(options)}")
    from pyflink.table import Schema

    # The explicit schema keeps the column names and logical types of the input
    # (a schema derived from the stream's type information would widen them).
    schema = Schema.new_builder().from_resolved_schema(table.get_resolved_schema()).build()
    return t_env.from_data_stream(t_env.to_data_stream(table), schema)
