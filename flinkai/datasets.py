"""Small labelled text sets used by tests and benchmarks.

The data is not shipped in the package: it lives in the workspace's shared folder
(``<checkout>/../shared/datasets``), or wherever ``$FLINKAI_DATASETS_DIR`` points.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from flinkai.errors import SetupError
from flinkai.paths import package_dir

__all__ = ["DatasetNotFoundError", "datasets_dir", "load_ag_news"]


class DatasetNotFoundError(SetupError):
    """A data set file is not where it was looked for."""


def datasets_dir() -> Path:
    """Root of the shared data sets.

    ``$FLINKAI_DATASETS_DIR`` if set, else ``<checkout>/../shared/datasets``.
    """
    env = os.environ.get("FLINKAI_DATASETS_DIR")
    if env:
        return Path(env).expanduser()
    return package_dir().parent.parent / "shared" / "datasets"


def load_ag_news(path: str | Path | None = None, limit: int | None = None) -> list[tuple[int, str]]:
    """Load AG News rows as ``(class, text)`` with text = ``title + ". " + description``.

    Args:
        path: The CSV file (``"class","title","description"``, no header). Defaults to
            ``datasets_dir() / "ag_news" / "news.csv"``.
        limit: Return at most this many rows, in file order.

    Returns:
        ``(label, text)`` pairs; labels are 1-4 as in the file. Text is kept as is
        (including the file's ``\\`` line-continuation artifacts) apart from stripping.

    Raises:
        DatasetNotFoundError: The file does not exist.
        SetupError: A row is malformed.
    """
    csv_path = Path(path) if path is not None else datasets_dir() / "ag_news" / "news.csv"
    if not csv_path.is_file():
        raise DatasetNotFoundError(
            f"AG News not found at {csv_path}; set FLINKAI_DATASETS_DIR or pass the path"
        )
    rows: list[tuple[int, str]] = []
    with csv_path.open(newline="", encoding="utf-8") as f:
        for line_no, row in enumerate(csv.reader(f), start=1):
            if limit is not None and len(rows) >= limit:
                break
            if len(row) != 3:
                raise SetupError(f"{csv_path}:{line_no}: expected 3 columns, got {len(row)}")
            label, title, description = row
            try:
                cls = int(label)
            except ValueError as e:
                raise SetupError(f"{csv_path}:{line_no}: class {label!r} is not an integer") from e
            rows.append((cls, f"{title.strip()}. {description.strip()}"))
    return rows
