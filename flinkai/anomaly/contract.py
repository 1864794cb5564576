"""The one contract every per-key anomaly detector follows, and its checker.

A :class:`KeyDetector` holds all state of one key, in river's shape with the state
as plain data:

* :meth:`KeyDetector.update` scores a point ``(ts_ms, value)`` against what came
  before it, then learns it (one call: the operator never scores without learning).
  A non-finite value or a timestamp not after the key's last one is refused with
  :class:`PointRejected`, and the state is left as it was.
* :meth:`KeyDetector.snapshot` is the key's whole state as plain data (numbers,
  strings, byte strings, lists, dicts) with a layout version and the model version;
  the operator stores it in Flink state and never pickles a config or a model.
* :meth:`KeyDetector.from_snapshot` rebuilds a key with the job's *current* model and
  settings; a snapshot of another model version restarts what that version means.

:func:`check_detector` is the contract as a test (like river's ``check_estimator``):
a state round trip mid-stream gives the same scores afterwards, the same input gives
the same scores, and the state and per-step cost stay within the operator's budgets
(:data:`STATE_BUDGET_BYTES`, :data:`STEP_BUDGET_MS`; docs/anomaly.md).
"""

from __future__ import annotations

import math
import pickle
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "STATE_BUDGET_BYTES",
    "STEP_BUDGET_MS",
    "ContractReport",
    "ContractViolation",
    "KeyDetector",
    "PointRejected",
    "PointScore",
    "RejectReason",
    "check_detector",
    "check_point",
]

#: The operator's per-key state budget: the pickled snapshot of one key.
STATE_BUDGET_BYTES = 64 * 1024
#: The operator's per-point budget: p99 of one detector step, in milliseconds.
STEP_BUDGET_MS = 8.0

RejectReason = Literal["not_finite", "out_of_order"]


class PointRejected(ValueError):
    """A point the detector refuses; the key's state is left as it was.

    Attributes:
        reason: ``not_finite`` or ``out_of_order`` (a dead-letter reason code).
        detail: Human-readable detail.
    """

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: RejectReason = reason
        self.detail = detail


def check_point(ts_ms: int, value: float, last_ts: int | None) -> None:
    """Refuse a non-finite value or a timestamp not after the key's last one.

    Raises:
        PointRejected: With reason ``not_finite`` or ``out_of_order``.
    """
    if not math.isfinite(value):
        raise PointRejected("not_finite", f"value {value!r} is not a finite number")
    if last_ts is not None and ts_ms <= last_ts:
        raise PointRejected("out_of_order", f"ts {ts_ms} is not after the key's last ts {last_ts}")


@dataclass(frozen=True)
class PointScore:
    """The result for one point."""

    score: float
    is_anomaly: bool


class KeyDetector(ABC):
    """All state of one key under one detector, and the per-point logic.

    :meth:`update` checks the point and keeps :attr:`last_ts`; subclasses implement
    :meth:`_step`, set :attr:`last_error` there (the detector's own output before any
    scorer, ``None`` where it has none; not state) and keep everything else a later
    point depends on in :meth:`snapshot`.
    """

    #: Version tag of :meth:`snapshot`'s layout.
    SNAPSHOT_VERSION = 1
    last_error: float | None = None
    #: The last accepted point's timestamp (state: a snapshot carries it).
    last_ts: int | None = None

    @property
    @abstractmethod
    def model_version(self) -> str:
        """What the key's state means; another version restarts it on restore."""

    def update(self, ts_ms: int, value: float) -> PointScore:
        """Score one point, then learn it.

        Raises:
            PointRejected: ``value`` is not finite, or ``ts_ms`` is not after the
                key's last timestamp; the state is unchanged.
        """
        check_point(ts_ms, value, self.last_ts)
        result = self._step(ts_ms, value)
        self.last_ts = ts_ms
        return result

    @abstractmethod
    def _step(self, ts_ms: int, value: float) -> PointScore:
        """Score and learn a point :meth:`update` has accepted."""

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """The key's whole state as plain data, with a layout version and the model version."""

    @classmethod
    @abstractmethod
    def from_snapshot(cls, snap: Mapping[str, Any], model: Any, config: Any) -> Self:
        """Rebuild a key from :meth:`snapshot` with the *current* model and settings.

        Raises:
            ValueError: A layout version this code does not know, or a malformed snapshot.
        """


class ContractViolation(AssertionError):
    """A detector that breaks :class:`KeyDetector`'s contract (see :func:`check_detector`)."""


@dataclass(frozen=True)
class ContractReport:
    """What :func:`check_detector` measured.

    Attributes:
        points: Points run (per pass).
        max_state_bytes: Largest pickled snapshot seen.
        step_p99_ms: p99 of one step's CPU time, in milliseconds.
    """

    points: int
    max_state_bytes: int
    step_p99_ms: float


_PLAIN = (type(None), bool, int, float, str, bytes)


def _plain(value: Any, path: str = "snapshot") -> str | None:
    """The path of the first value in ``value`` that is not plain data, else ``None``."""
    if isinstance(value, _PLAIN):
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            bad = _plain(item, f"{path}[{i}]")
            if bad:
                return bad
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            bad = None if isinstance(k, str) else f"{path} key {k!r}"
            bad = bad or _plain(item, f"{path}[{k!r}]")
            if bad:
                return bad
        return None
    return f"{path}: {type(value).__name__}"


def _run(
    det: KeyDetector,
    points: Sequence[tuple[int, float]],
    sizes: list[int] | None = None,
    times: list[float] | None = None,
    size_every: int = 0,
) -> list[tuple[float, bool]]:
    out = []
    for i, (ts, value) in enumerate(points):
        t0 = time.process_time()
        result = det.update(ts, value)
        if times is not None:
            times.append((time.process_time() - t0) * 1000)
        out.append((result.score, result.is_anomaly))
        if sizes is not None and size_every and (i + 1) % size_every == 0:
            sizes.append(len(pickle.dumps(det.snapshot())))
    return out


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    # repr: NaN equals NaN, and 0.1 + 0.2 never passes for 0.3
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if repr(x) != repr(y):
            return i
    return None


def check_detector(
    new: Callable[[], KeyDetector],
    restore: Callable[[Mapping[str, Any]], KeyDetector],
    points: Sequence[tuple[int, float]],
    state_budget: int = STATE_BUDGET_BYTES,
    step_budget_ms: float = STEP_BUDGET_MS,
    round_trip_at: int | None = None,
) -> ContractReport:
    """Check one detector against the contract over ``points`` (a single key).

    Three passes over ``points``, each from a fresh detector (``new()``): the first is
    the reference; the second must give the same scores (determinism); the third takes
    the operator's state round trip at ``round_trip_at`` (default: half way):
    snapshot, pickle, unpickle, ``restore`` and go on, and must give the same scores
    from there. The snapshot must be plain data, and its pickled size (every
    ``len(points) // 20`` points and at the end) at most ``state_budget``; the p99 of
    a step's CPU time (so other processes' load does not count) at most
    ``step_budget_ms``.

    Args:
        new: A fresh key's detector.
        restore: A key's detector from an unpickled snapshot (the operator's
            ``from_snapshot(snap, model, config)`` with its model and config).
        points: ``(ts_ms, value)`` in time order, all accepted.

    Returns:
        What was measured.

    Raises:
        ContractViolation: The first broken rule, with where it broke.
    """
    n = len(points)
    if n < 4:
        raise ValueError("check_detector needs at least 4 points")
    det = new()
    if not isinstance(det, KeyDetector):
        raise ContractViolation(f"{type(det).__name__} is not a KeyDetector")
    sizes: list[int] = []
    times: list[float] = []
    reference = _run(det, points, sizes, times, max(n // 20, 1))
    snap = det.snapshot()
    bad = _plain(snap)
    if bad:
        raise ContractViolation(f"{type(det).__name__}: snapshot is not plain data at {bad}")
    sizes.append(len(pickle.dumps(snap)))

    again = _run(new(), points)
    i = _first_difference(reference, again)
    if i is not None:
        raise ContractViolation(
            f"{type(det).__name__} is not deterministic: point {i} scored "
            f"{reference[i]} then {again[i]}"
        )

    cut = n // 2 if round_trip_at is None else round_trip_at
    first = new()
    head = _run(first, points[:cut])
    blob = pickle.dumps(first.snapshot())
    restored = restore(pickle.loads(blob))
    if restored.model_version != first.model_version:
        raise ContractViolation(
            f"{type(det).__name__}: model version {first.model_version!r} came back as "
            f"{restored.model_version!r}"
        )
    tail = _run(restored, points[cut:])
    i = _first_difference(reference, head + tail)
    if i is not None:
        raise ContractViolation(
            f"{type(det).__name__}: after a state round trip at point {cut}, point {i} "
            f"scored {(head + tail)[i]} instead of {reference[i]}"
        )

    largest = max(sizes)
    if largest > state_budget:
        raise ContractViolation(
            f"{type(det).__name__}: state of {largest} bytes per key, over the "
            f"{state_budget}-byte budget"
        )
    ordered = sorted(times)
    p99 = ordered[min(math.ceil(0.99 * n) - 1, n - 1)]
    if p99 > step_budget_ms:
        raise ContractViolation(
            f"{type(det).__name__}: step p99 {p99:.3f} ms CPU, over the {step_budget_ms} ms budget"
        )
    return ContractReport(n, largest, p99)
