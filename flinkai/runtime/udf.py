"""What every flinkai Python UDF does in ``open()``: read the shipped config, guard rows."""

from __future__ import annotations

from typing import Any

from flinkai import metrics
from flinkai.config import Config
from flinkai.functions.guard import RowGuard

__all__ = ["row_guard"]


def row_guard(function_context: Any, config: Config, function: str) -> RowGuard:
    """A :class:`RowGuard` with the config's policy, counting into ``internal_errors``."""
    group = metrics.flinkai_group(function_context.get_metric_group())
    counter = group.counter(metrics.INTERNAL_ERRORS.name)
    return RowGuard(function, config.runtime.udf_errors, counter.inc)
