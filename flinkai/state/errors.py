"""Errors the snapshot store raises; each maps to a decision the caller makes.

A rejected snapshot is never returned: the caller recomputes (a prefill) or is
served an older valid version. The ``reason`` of a rejection is the label it is
counted under in :attr:`~flinkai.state.base.StoreStats.rejected`.
"""

from __future__ import annotations

from typing import Literal

from flinkai.errors import FlinkAIError

__all__ = [
    "CORRUPT_REASONS",
    "MISMATCH_REASONS",
    "CorruptReason",
    "MismatchReason",
    "SnapshotCorruptError",
    "SnapshotMismatchError",
    "SnapshotNotFoundError",
    "StateError",
    "StoreNotOpenError",
    "StoreUnavailableError",
]

#: Why stored bytes cannot be trusted: bad or missing header, payload that does not
#: decompress, a digest that differs, a size that disagrees with dtype and shape.
CorruptReason = Literal["header", "decode", "checksum", "size"]
#: Why a sound snapshot does not fit the request.
MismatchReason = Literal["model_version", "dtype", "shape"]

CORRUPT_REASONS: tuple[CorruptReason, ...] = ("header", "decode", "checksum", "size")
MISMATCH_REASONS: tuple[MismatchReason, ...] = ("model_version", "dtype", "shape")


class StateError(FlinkAIError):
    """Base class for snapshot store failures."""


class SnapshotNotFoundError(StateError):
    """No such key or version (never written, deleted or compacted away); recompute."""


class SnapshotCorruptError(StateError):
    """The stored bytes fail verification; the version is skipped, never served.

    Attributes:
        reason: One of :data:`CORRUPT_REASONS`.
    """

    def __init__(self, reason: CorruptReason, detail: str) -> None:
        super().__init__(f"corrupt snapshot ({reason}): {detail}")
        self.reason: CorruptReason = reason


class SnapshotMismatchError(StateError):
    """The snapshot is sound but was made for another model version, dtype or shape.

    Attributes:
        reason: One of :data:`MISMATCH_REASONS`.
    """

    def __init__(self, reason: MismatchReason, detail: str) -> None:
        super().__init__(f"snapshot does not match the request ({reason}): {detail}")
        self.reason: MismatchReason = reason


class StoreUnavailableError(StateError):
    """The backing service (Kafka) did not answer in time; retry later or recompute."""


class StoreNotOpenError(StoreUnavailableError):
    """The store could not be opened yet (see :class:`~flinkai.state.reopening.ReopeningStore`).

    Raised at once, without touching the network: a caller treats it as a miss and
    the store retries opening in the background.
    """
