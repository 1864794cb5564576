"""An account's spend over a sliding event-time window, as plain data.

The window holds ``(ts_ms, amount)`` of the account's *approved* transactions. The
spend seen by an event at ``ts`` is the sum over entries with
``ts - window_ms < t <= ts``; entries older than the newest time seen minus the
window are pruned on every update, so the state stays bounded by the account's
rate. A late event (older than the newest entry) reads the window as of its own
time, so the same events in the same order always give the same spends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DAY_MS", "SpendWindow"]

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class SpendWindow:
    """Immutable: :meth:`add` returns a new window.

    Attributes:
        entries: ``(ts_ms, amount)`` in arrival order.
        window_ms: Window length (24 h).
    """

    entries: tuple[tuple[int, float], ...] = ()
    window_ms: int = DAY_MS

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1

    def spend(self, ts_ms: int) -> float:
        """Approved spend in ``(ts_ms - window_ms, ts_ms]``."""
        low = ts_ms - self.window_ms
        return float(sum(a for t, a in self.entries if low < t <= ts_ms))

    def add(self, ts_ms: int, amount: float) -> SpendWindow:
        """A window with this spend added and entries out of reach pruned."""
        newest = max([ts_ms, *(t for t, _ in self.entries)])
        kept = tuple(e for e in self.entries if e[0] > newest - self.window_ms)
        return SpendWindow((*kept, (int(ts_ms), float(amount))), self.window_ms)

    def snapshot(self) -> dict[str, Any]:
        """Plain data: a version tag and ``[ts_ms, amount]`` pairs."""
        return {"version": self.SNAPSHOT_VERSION, "spend": [[t, a] for t, a in self.entries]}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any] | None, window_ms: int = DAY_MS) -> SpendWindow:
        """Rebuild from :meth:`snapshot` (``None``: an empty window).

        Raises:
            ValueError: Unknown layout version.
        """
        if snap is None:
            return cls((), window_ms)
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown spend-window state version {snap.get('version')!r}")
        return cls(tuple((int(t), float(a)) for t, a in snap["spend"]), window_ms)
