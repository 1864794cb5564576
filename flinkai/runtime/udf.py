"""What every flinkai Python UDF shares: the shipped config's row guard in ``open()``, and
the dead-letter columns that close each parse function's result ROW."""

from __future__ import annotations

from typing import Any

from pyflink.table import DataTypes
from pyflink.table.types import RowField, RowType

from flinkai import metrics
from flinkai.config import Config
from flinkai.functions.events import Reason, payload_base64
from flinkai.functions.guard import RowGuard, internal_error_detail

__all__ = ["dead_letter_row", "internal_error_row", "row_guard"]


def row_guard(function_context: Any, config: Config, function: str) -> RowGuard:
    """A :class:`RowGuard` with the config's policy, counting into ``internal_errors``."""
    group = metrics.flinkai_group(function_context.get_metric_group())
    counter = group.counter(metrics.INTERNAL_ERRORS.name)
    return RowGuard(function, config.runtime.udf_errors, counter.inc)


def dead_letter_row(*fields: RowField, payload: bool = True) -> RowType:
    """A parse function's result ROW: ``fields``, then the dead-letter columns.

    The columns are ``error_reason``, ``error_detail`` and (with ``payload``)
    ``payload_base64``, in that order: SQL jobs select them by position and name, so
    the order is part of each job's contract.
    """
    tail = [
        DataTypes.FIELD("error_reason", DataTypes.STRING()),
        DataTypes.FIELD("error_detail", DataTypes.STRING()),
    ]
    if payload:
        tail.append(DataTypes.FIELD("payload_base64", DataTypes.STRING()))
    return DataTypes.ROW([*fields, *tail])


def internal_error_row(
    leading: int, exc: Exception, payload: bytes | None = None, *, with_payload: bool = True
) -> tuple[object, ...]:
    """The values of a :func:`dead_letter_row` for a row that raised ``exc``.

    Args:
        leading: How many fields come before the dead-letter columns (all NULL here).
        exc: What the row raised (its detail is bounded, see ``internal_error_detail``).
        payload: The row's raw record value, kept as base64.
        with_payload: False for a row type built with ``payload=False``.
    """
    tail = (payload_base64(payload),) if with_payload else ()
    return (None,) * leading + (Reason.INTERNAL_ERROR.value, internal_error_detail(exc), *tail)
