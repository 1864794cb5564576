"""NAB-layout series: the folder loader, labelled windows and the probationary period.

A NAB-layout folder holds ``data/<group>/*.csv`` (``timestamp,value``) and a windows
file (``combined_windows.json``, or ``labels/combined_windows.json`` in a clone of
numenta/NAB). ``flinkai model train-anomaly`` trains on such a folder and holds out
each file's probationary rows (:func:`probationary_length`) for validation. Scoring
a detector against the windows is the benchmark's business
(``flinkai_bench.research.anomaly.nab_score``), not the product's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from flinkai.anomaly.errors import NabDataError

__all__ = [
    "PROBATION_PERCENT",
    "LabelledSeries",
    "NabSeries",
    "Window",
    "load_nab_folder",
    "load_windows",
    "probationary_length",
    "require_nab_folder",
    "windows_to_rows",
]

PROBATION_PERCENT = 0.15


# NAB caps the probationary period at 15 % of 5,000 rows.
_PROBATION_CAP_ROWS = 5000


FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Window:
    """A labelled anomaly window as row indices, both ends included."""

    start: int
    end: int

    @property
    def width(self) -> int:
        """Number of rows in the window."""
        return self.end - self.start + 1


@dataclass(frozen=True)
class LabelledSeries:
    """What scoring needs to know about one series: its name, length and windows.

    Attributes:
        name: Corpus-relative name, e.g. ``realTweets/Twitter_volume_AAPL.csv``.
        n_rows: Number of rows.
        windows: Anomaly windows, sorted and not overlapping.
    """

    name: str
    n_rows: int
    windows: tuple[Window, ...]

    def __post_init__(self) -> None:
        _check_windows(self.name, self.n_rows, self.windows)


@dataclass(frozen=True)
class NabSeries:
    """One series read from a NAB-layout folder.

    Attributes:
        labels: Name, length and windows for scoring.
        timestamps: Row timestamps.
        values: Row values.
    """

    labels: LabelledSeries
    timestamps: npt.NDArray[np.datetime64]
    values: FloatArray


def _check_windows(name: str, n_rows: int, windows: Sequence[Window]) -> None:
    """Refuse windows that are empty, out of range, unsorted or overlapping."""
    prev_end = -1
    for w in windows:
        if not 0 <= w.start <= w.end < n_rows:
            raise NabDataError(f"{name}: window {w} is outside rows 0..{n_rows - 1}")
        if w.start <= prev_end:
            raise NabDataError(f"{name}: windows must be sorted and not overlap ({w})")
        prev_end = w.end


def probationary_length(n_rows: int, probation_percent: float = PROBATION_PERCENT) -> int:
    """Number of leading rows excluded from scoring.

    Args:
        n_rows: Series length.
        probation_percent: Fraction of the series (capped at that fraction of 5,000 rows).

    Returns:
        Count of probationary rows; row ``i`` is scored when ``i >= count``.
    """
    limit = min(math.floor(probation_percent * n_rows), probation_percent * _PROBATION_CAP_ROWS)
    return math.ceil(limit)


def load_windows(path: str | Path) -> dict[str, list[tuple[pd.Timestamp, pd.Timestamp]]]:
    """Read a NAB windows file (``{"group/file.csv": [[start, end], ...]}``).

    Args:
        path: Path to e.g. ``combined_windows.json``.

    Returns:
        Window limits as timestamps, per corpus-relative file name.
    """
    raw = json.loads(Path(path).read_text())
    try:
        return {
            name: [(pd.Timestamp(a), pd.Timestamp(b)) for a, b in limits]
            for name, limits in raw.items()
        }
    except (TypeError, ValueError) as e:
        raise NabDataError(f"{path}: malformed window list: {e}") from e


def windows_to_rows(
    name: str,
    timestamps: npt.NDArray[np.datetime64],
    limits: Sequence[tuple[pd.Timestamp, pd.Timestamp]],
) -> tuple[Window, ...]:
    """Map timestamp windows onto row indices.

    NAB's window limits are row timestamps; when they are not, a window covers the
    rows whose timestamps fall within ``[start, end]``: from the first such row to
    the last. Rows need not be in time order: one NAB file
    (``realKnownCause/machine_temperature_system_failure.csv``) records one hour twice.

    Args:
        name: Series name, for errors.
        timestamps: Row timestamps, in file order.
        limits: ``(start, end)`` pairs.

    Returns:
        Windows as row ranges, sorted by start.

    Raises:
        NabDataError: If a window holds no row.
    """
    ts = np.asarray(timestamps, dtype="datetime64[ns]")
    windows = []
    for start, end in sorted(limits):
        inside = np.flatnonzero(
            (ts >= np.datetime64(start, "ns")) & (ts <= np.datetime64(end, "ns"))
        )
        if len(inside) == 0:
            raise NabDataError(f"{name}: window [{start}, {end}] holds no row")
        windows.append(Window(int(inside[0]), int(inside[-1])))
    return tuple(windows)


def require_nab_folder(root: str | Path) -> Path:
    """``root`` if it is a NAB-layout folder (``data/`` and a windows file), else a clear error.

    The anomaly tests call this instead of skipping: CI has the shared subset at
    ``../shared/datasets/nab`` beside the checkout, so its absence is a setup fault.

    Raises:
        NabDataError: ``root`` has no ``data`` folder or no ``combined_windows.json``
            (directly or under ``labels/``).
    """
    path = Path(root)
    windows = [path / "combined_windows.json", path / "labels" / "combined_windows.json"]
    if not (path / "data").is_dir() or not any(w.is_file() for w in windows):
        raise NabDataError(
            f"NAB data not found at {path}: expected data/<group>/*.csv and "
            "combined_windows.json (the shared subset lives at ../shared/datasets/nab beside "
            "the checkout, as on CI; a clone of numenta/NAB works too)"
        )
    return path


def load_nab_folder(
    root: str | Path,
    groups: Sequence[str] | None = None,
    windows_file: str = "combined_windows.json",
) -> dict[str, NabSeries]:
    """Load every ``data/<group>/*.csv`` of a NAB-layout folder with its windows.

    Args:
        root: Folder holding ``data/`` and the windows file (or ``labels/`` holding
            it, as in a clone of NAB).
        groups: Only these groups (folder names under ``data/``); all when None.
        windows_file: Windows file name under ``root``.

    Returns:
        Series keyed by ``group/file.csv``, in sorted order.

    Raises:
        NabDataError: If a data file has no entry in the windows file, or a file
            lacks the ``timestamp``/``value`` columns. Rows are kept in file order,
            as NAB scores them, even where a timestamp goes back.
    """
    root = Path(root)
    windows_path = root / windows_file
    if not windows_path.exists() and (root / "labels" / windows_file).exists():
        windows_path = root / "labels" / windows_file  # a clone of NAB's own repository
    limits = load_windows(windows_path)
    out: dict[str, NabSeries] = {}
    for path in sorted((root / "data").glob("*/*.csv")):
        name = f"{path.parent.name}/{path.name}"
        if groups is not None and path.parent.name not in groups:
            continue
        if name not in limits:
            raise NabDataError(f"{name}: no entry in {windows_file}")
        out[name] = _read_series(path, name, limits[name])
    return out


def _read_series(
    path: Path, name: str, limits: Sequence[tuple[pd.Timestamp, pd.Timestamp]]
) -> NabSeries:
    frame = pd.read_csv(path)
    if not {"timestamp", "value"} <= set(frame.columns):
        raise NabDataError(f"{name}: expected columns timestamp,value")
    ts = pd.to_datetime(frame["timestamp"]).to_numpy(dtype="datetime64[ns]")
    labels = LabelledSeries(name, len(ts), windows_to_rows(name, ts, limits))
    return NabSeries(labels, ts, frame["value"].to_numpy(dtype=np.float64))
