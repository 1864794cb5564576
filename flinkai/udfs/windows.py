"""SQL function for the adaptive window length.

CREATE TEMPORARY FUNCTION adaptive_window_ms AS 'windows.adaptive_window_ms' LANGUAGE PYTHON;
SELECT adaptive_window_ms(event_ms, delay_ms) ...

``adaptive_window_ms(event_time, processing_delay_ms)`` returns the window length
(BIGINT, ms) for a processing delay, clamped to the configured bounds. When
``processing_delay_ms`` is NULL the delay is measured as the worker's clock minus
``event_time`` (epoch ms BIGINT or a TIMESTAMP); when both are NULL it is the
base length. The bounds come from a ``adaptive_window`` section of the shipped
config when it has one, else :class:`AdaptiveWindowConfig` defaults.
"""

import time
from collections.abc import Callable
from datetime import datetime

from pyflink.table import DataTypes
from pyflink.table.udf import FunctionContext, ScalarFunction, udf

from flinkai.config import AdaptiveWindowConfig
from flinkai.functions.adaptive_window import adaptive_window_ms as _window_ms
from flinkai.functions.guard import RowGuard
from flinkai.runtime.environment import config_from_function_context
from flinkai.runtime.udf import row_guard

__all__ = ["AdaptiveWindowMs", "adaptive_window_ms", "window_config"]


def window_config(config: object) -> AdaptiveWindowConfig:
    """The config's ``adaptive_window`` section, or the defaults when it has none."""
    section = getattr(config, "adaptive_window", None)
    return section if isinstance(section, AdaptiveWindowConfig) else AdaptiveWindowConfig()


class AdaptiveWindowMs(ScalarFunction):
    """Row-at-a-time window length; the clock is injectable for tests.

    Args:
        clock: Epoch seconds; ``time.time`` when omitted.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.time
        self._cfg = AdaptiveWindowConfig()
        self._guard = RowGuard("adaptive_window_ms")

    def open(self, function_context: FunctionContext) -> None:
        config = config_from_function_context(function_context)
        self._cfg = window_config(config)
        self._guard = row_guard(function_context, config, "adaptive_window_ms")

    def eval(
        self, event_time: int | datetime | None, processing_delay_ms: float | None
    ) -> int | None:
        # A value with no length (a NaN delay) gives NULL, counted in internal_errors:
        # this function has no error column for the dead-letter topic.
        (length,) = self._guard.rows(
            [(event_time, processing_delay_ms)], lambda a: self._length(*a), lambda _, __: None
        )
        return length

    def _length(self, event_time: int | datetime | None, processing_delay_ms: float | None) -> int:
        delay = processing_delay_ms
        if delay is None and event_time is not None:
            event_ms = (
                event_time.timestamp() * 1000
                if isinstance(event_time, datetime)
                else float(event_time)
            )
            delay = self._clock() * 1000 - event_ms
        return _window_ms(delay, self._cfg)


adaptive_window_ms = udf(AdaptiveWindowMs(), result_type=DataTypes.BIGINT())
