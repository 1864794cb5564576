"""The shape of a generated table: which JSON rows, which columns (``flinkai bench report``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROW_KEY", "VALUE", "Column", "TableSpec", "col"]

#: A row's own key when the rows come from a JSON object (``{"raw": {...}, ...}``).
ROW_KEY = "@key"

#: The field a plain value gets when the rows are an object of numbers or strings.
VALUE = "value"


@dataclass(frozen=True)
class Column:
    """One table column.

    Attributes:
        header: Column heading.
        path: Keys from the row to the value; :data:`ROW_KEY` alone is the row's key.
        fmt: Format spec for numbers (``",.0f"``, ``".2f"``, ``".1%"``); empty: ``str``.
        missing: What a missing or null value shows.
    """

    header: str
    path: tuple[str, ...]
    fmt: str = ""
    missing: str = "n/a"


def col(header: str, key: str | tuple[str, ...], fmt: str = "", missing: str = "n/a") -> Column:
    """A :class:`Column`; a string key is split on dots (pass a tuple for keys with dots)."""
    path = tuple(key.split(".")) if isinstance(key, str) else key
    return Column(header, path, fmt, missing)


@dataclass(frozen=True)
class TableSpec:
    """One generated table.

    Attributes:
        source: JSON file, relative to ``benchmarks/results/``.
        rows: Dotted path to the rows: a list of objects, or an object of objects
            (each row's key is then :data:`ROW_KEY`) or of plain values (each in
            the field :data:`VALUE`). A part ``field=value`` picks
            the first list element whose field equals value; a number indexes a list.
        columns: The columns, in order.
        where: Keep only rows whose field (first item) equals the value (second);
            the field :data:`ROW_KEY` is the row's key.
        exclude: Drop rows whose field (first item) equals the value (second).
        labels: Display names for row keys (:data:`ROW_KEY`), as (key, name) pairs.
        note: One sentence after the link (what the run was); optional.
    """

    source: str
    rows: str
    columns: tuple[Column, ...]
    where: tuple[tuple[str, str], ...] = ()
    exclude: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    note: str = ""
