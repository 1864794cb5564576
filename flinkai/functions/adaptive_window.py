"""Adaptive window sizing: longer windows when the pipeline falls behind.

The window length grows linearly with the measured processing delay so that a
backlogged job emits fewer, larger windows instead of piling up small ones, and it
is clamped so results stay neither too frequent nor too stale::

    window_ms = clamp(base_ms + delay_ms / delay_divisor, min_ms, max_ms)

With the defaults (base 5 s, divisor 10, i.e. slope 0.1) a 10 s delay gives a 6 s
window, and the 60 s ceiling is reached at 550 s of delay.

Everything here is pure: :func:`adaptive_window_ms` is a function of its inputs,
and :class:`AdaptiveWindowSizer` is a small state machine driven by the caller (the
Flink ``KeyedProcessFunction`` keeps it in keyed state and feeds it the delay it
measured for the window that just closed). Nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from flinkai.config import AdaptiveWindowConfig

__all__ = ["AdaptiveWindowSizer", "adaptive_window_ms"]


def adaptive_window_ms(
    processing_delay_ms: float | None, cfg: AdaptiveWindowConfig | None = None
) -> int:
    """Window length for a given processing delay.

    Args:
        processing_delay_ms: How far processing lags behind event time, in ms.
            ``None`` means "not measured yet" (e.g. the first window of a key) and
            yields the base length, clamped. Negative values (clock skew between
            producer and worker) are treated as 0: a job cannot be ahead of its input.
        cfg: Parameters; the defaults when omitted.

    Returns:
        The window length in milliseconds, within ``[cfg.min_ms, cfg.max_ms]``.

    Raises:
        ValueError: If the delay is NaN, which signals a measurement bug that a
            silent default would hide.
    """
    cfg = cfg or AdaptiveWindowConfig()
    if processing_delay_ms is None:
        delay = 0.0
    else:
        delay = float(processing_delay_ms)
        if math.isnan(delay):
            raise ValueError("processing_delay_ms is NaN")
        delay = max(delay, 0.0)
    # +inf delay is legal input and lands on max_ms through the clamp.
    raw = cfg.base_ms + delay / cfg.delay_divisor
    return int(min(max(raw, cfg.min_ms), cfg.max_ms))


class AdaptiveWindowSizer:
    """Next-window length from the last window's delay, with a shrink on drift.

    The operator calls :meth:`next_window_ms` once per closed window with the delay
    it measured for that window. After :meth:`shrink` (typically on a drift event)
    the next window has ``min_ms`` so the post-drift state is summarised quickly;
    the window after that follows the delay rule again.

    Example:
        >>> sizer = AdaptiveWindowSizer()
        >>> sizer.next_window_ms(10_000)
        6000
        >>> sizer.shrink()
        >>> sizer.next_window_ms(10_000)
        1000
        >>> sizer.next_window_ms(10_000)
        6000
    """

    def __init__(self, cfg: AdaptiveWindowConfig | None = None) -> None:
        self.cfg = cfg or AdaptiveWindowConfig()
        self._shrink_pending = False
        self._current_ms = adaptive_window_ms(None, self.cfg)

    def snapshot(self) -> dict[str, Any]:
        """Plain data for a checkpoint; the config is not part of it."""
        return {"current_ms": self._current_ms, "shrink_pending": self._shrink_pending}

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], cfg: AdaptiveWindowConfig | None = None
    ) -> AdaptiveWindowSizer:
        """A sizer with ``cfg`` that continues a :meth:`snapshot`; the length is clamped
        to ``cfg``'s bounds, so new bounds hold from the first restored window."""
        sizer = cls(cfg)
        c = sizer.cfg
        sizer._current_ms = min(max(int(snap["current_ms"]), c.min_ms), c.max_ms)
        sizer._shrink_pending = bool(snap["shrink_pending"])
        return sizer

    @property
    def current_ms(self) -> int:
        """Length of the window most recently handed out (the base before any)."""
        return self._current_ms

    @property
    def shrink_pending(self) -> bool:
        """Whether the next window will be forced to ``min_ms``."""
        return self._shrink_pending

    def shrink(self) -> None:
        """Make the next window ``min_ms`` long (one-shot; idempotent until used)."""
        self._shrink_pending = True

    def next_window_ms(self, last_processing_delay_ms: float | None) -> int:
        """Length of the next window.

        Args:
            last_processing_delay_ms: Delay measured for the window that just
                closed; ``None`` if unknown. Same rules as :func:`adaptive_window_ms`.

        Returns:
            The next window length in milliseconds.

        Raises:
            ValueError: If the delay is NaN.
        """
        # Validate even when shrinking, so a NaN is never swallowed by a drift.
        computed = adaptive_window_ms(last_processing_delay_ms, self.cfg)
        if self._shrink_pending:
            self._shrink_pending = False
            computed = self.cfg.min_ms
        self._current_ms = computed
        return computed
