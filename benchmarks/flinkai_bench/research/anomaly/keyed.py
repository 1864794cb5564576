"""Research detectors behind the operator's detector contract.

A research detector scores values only (``update(value) -> float``) and keeps its
state as plain data (``snapshot()``, rebuilt by a ``restore`` function): ARTime, the
bench's CAD variants with NAB's range or a probation-learnt one. :class:`ValueKeyDetector`
gives it the operator's :class:`~flinkai.anomaly.contract.KeyDetector` shape (time
checks, a versioned snapshot, ``from_snapshot(snap, model, config)``), so the bench
runs it through the same runner as the operator's own detectors and
:func:`~flinkai.anomaly.contract.check_detector` holds it to the same contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from flinkai.anomaly.contract import KeyDetector, PointScore

__all__ = ["ValueDetector", "ValueKeyDetector", "ValueModel"]


class ValueDetector(Protocol):
    """Scores a value against what came before it, learns it, and snapshots its state."""

    def update(self, x: float) -> float: ...

    def snapshot(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ValueModel:
    """A research detector's fixed settings, as the operator's loaded model would hold them.

    Attributes:
        name: The model version: what a stored key's state means.
        new: A fresh key's detector.
        restore: A key's detector from its ``snapshot()``.
        threshold: ``is_anomaly`` is ``score >= threshold``.
    """

    name: str
    new: Callable[[], ValueDetector]
    restore: Callable[[Mapping[str, Any]], ValueDetector]
    threshold: float = 0.5

    @property
    def model_version(self) -> str:
        return self.name


class ValueKeyDetector(KeyDetector):
    """One key of a value-only research detector under the operator's contract.

    Args:
        model: The detector's settings and how to build it.
        config: Unused (the research detectors take no operator settings); accepted
            so the constructor and :meth:`from_snapshot` match the operator's.
    """

    def __init__(self, model: ValueModel, config: Any = None) -> None:
        self.model = model
        self.inner = model.new()
        self.last_error: float | None = None

    @property
    def model_version(self) -> str:
        return self.model.model_version

    def _step(self, ts_ms: int, value: float) -> PointScore:
        score = self.inner.update(value)
        self.last_error = score
        return PointScore(score, score >= self.model.threshold)

    def snapshot(self) -> dict[str, Any]:
        """The key's state as plain data with version tags."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "model_version": self.model_version,
            "detector": self.inner.snapshot(),
            "last_ts": self.last_ts,
        }

    @classmethod
    def from_snapshot(
        cls, snap: Mapping[str, Any], model: ValueModel, config: Any = None
    ) -> ValueKeyDetector:
        """Rebuild with the *current* model; another model version restarts the key.

        Raises:
            ValueError: Unknown layout version.
        """
        if snap.get("version") != cls.SNAPSHOT_VERSION:
            raise ValueError(f"unknown research key-state version {snap.get('version')!r}")
        det = cls(model, config)
        last = snap["last_ts"]
        det.last_ts = None if last is None else int(last)
        if snap["model_version"] == model.model_version:
            det.inner = model.restore(snap["detector"])
        return det
