"""``flinkai bench report``: markdown tables generated from the results JSON.

A markdown file marks each generated block with two comments::

    <!-- report:NAME begin -->
    ... generated: a link to the JSON file, then the table ...
    <!-- report:NAME end -->

``NAME`` is a :class:`TableSpec` in :data:`flinkai_bench.report_tables.TABLES`: which
JSON file under ``benchmarks/results/`` it reads, where its rows are, and which
columns it shows. ``flinkai bench report`` rewrites every block in place;
``--check`` writes nothing and exits 1 when a file differs from what it would
write, so a test keeps the README and the JSON in step. ``--table NAME`` prints one
block to stdout.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flinkai_bench.report_spec import ROW_KEY, VALUE, Column, TableSpec, col

__all__ = [
    "BENCHMARKS_DIR",
    "ROW_KEY",
    "VALUE",
    "Column",
    "ReportError",
    "TableSpec",
    "col",
    "register",
    "render_block",
    "render_table",
    "resolve",
    "select_rows",
    "update_markdown",
]

#: ``benchmarks/``: the README's folder; the results sit in ``results/`` below it.
BENCHMARKS_DIR = Path(__file__).resolve().parents[1]

_BLOCK = re.compile(
    r"(?P<begin><!-- report:(?P<name>[\w.-]+) begin -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- report:(?P=name) end -->)",
    re.DOTALL,
)


class ReportError(ValueError):
    """A spec names a JSON file, a path or a block that is not there."""


def resolve(data: Any, path: Sequence[str]) -> Any:
    """The value at ``path`` in ``data`` (objects by key, lists by index or ``field=value``).

    Args:
        data: Parsed JSON.
        path: Keys, list indexes (digits) or ``field=value`` selectors, outermost first.

    Raises:
        ReportError: A part of the path is missing.
    """
    value = data
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, list) and "=" in part:
            field, wanted = part.split("=", 1)
            match = [v for v in value if isinstance(v, Mapping) and str(v.get(field)) == wanted]
            if not match:
                raise ReportError(f"no element with {field} = {wanted!r}")
            value = match[0]
        else:
            raise ReportError(f"no {part!r} in path {'.'.join(path)!r}")
    return value


def select_rows(data: Any, spec: TableSpec) -> list[tuple[str, Mapping[str, Any]]]:
    """The rows a spec shows, each with its key (its index for a list)."""
    found = resolve(data, spec.rows.split(".") if spec.rows else ())
    if isinstance(found, Mapping):
        items = [(str(k), v) for k, v in found.items()]
    elif isinstance(found, list):
        items = [(str(i), v) for i, v in enumerate(found)]
    else:
        raise ReportError(f"{spec.rows!r} in {spec.source} is neither a list nor an object")
    # a plain value (``{"raw": 1.3, ...}``) becomes a row with one field, ``value``
    rows = [(k, v if isinstance(v, Mapping) else {VALUE: v}) for k, v in items]

    def field(key: str, row: Mapping[str, Any], name: str) -> str:
        return key if name == ROW_KEY else str(row.get(name))

    rows = [(k, v) for k, v in rows if all(field(k, v, f) == w for f, w in spec.where)]
    return [(k, v) for k, v in rows if not any(field(k, v, f) == x for f, x in spec.exclude)]


def _cell(value: Any, fmt: str, missing: str) -> str:
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and fmt:
        return format(value, fmt)
    # a pipe would end the markdown cell
    return str(value).replace("|", "\\|").replace("\n", " ")


def _value(key: str, row: Mapping[str, Any], column: Column, labels: Mapping[str, str]) -> Any:
    if column.path == (ROW_KEY,):
        return labels.get(key, key)
    try:
        return resolve(row, column.path)
    except ReportError:
        return None


def render_table(spec: TableSpec, data: Any) -> str:
    """The markdown table of ``spec`` over parsed JSON ``data`` (no trailing newline)."""
    rows = select_rows(data, spec)
    if not rows:
        raise ReportError(f"no rows at {spec.rows!r} in {spec.source}")
    lines = [
        "| " + " | ".join(c.header for c in spec.columns) + " |",
        "|" + "|".join("---:" if c.fmt else "---" for c in spec.columns) + "|",
    ]
    labels = dict(spec.labels)
    for key, row in rows:
        cells = [_cell(_value(key, row, c, labels), c.fmt, c.missing) for c in spec.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_block(spec: TableSpec, results_dir: Path, markdown_dir: Path) -> str:
    """A block's body: the link to its JSON file, the note, the table; ends in a newline.

    Args:
        spec: The table.
        results_dir: The folder ``spec.source`` is relative to.
        markdown_dir: The folder of the markdown file; the link is relative to it.

    Raises:
        ReportError: The JSON file is missing or the spec does not fit it.
    """
    source = results_dir / spec.source
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ReportError(f"results file missing: {source}") from e
    link = Path(os.path.relpath(source, markdown_dir)).as_posix()
    head = f"Generated by `flinkai bench report` from [`{spec.source}`]({link})."
    if spec.note:
        head += " " + spec.note
    # no blank line: a GFM table may interrupt a paragraph, and the file stays short
    return f"{head}\n{render_table(spec, data)}\n"


def update_markdown(
    text: str, tables: Mapping[str, TableSpec], results_dir: Path, markdown_dir: Path
) -> str:
    """``text`` with every ``report:NAME`` block regenerated.

    Args:
        text: A markdown file's text.
        tables: Table specs by the names the markers use.
        results_dir: The folder the specs' sources are relative to.
        markdown_dir: The folder of the markdown file.

    Raises:
        ReportError: A block names no known table.
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in tables:
            raise ReportError(f"unknown report table {name!r}")
        body = render_block(tables[name], results_dir, markdown_dir)
        return match.group("begin") + body + match.group("end")

    return _BLOCK.sub(replace, text)


def _run(args: argparse.Namespace) -> int:
    from flinkai_bench.report_tables import TABLES

    results_dir = Path(args.results)
    if args.table:
        if args.table not in TABLES:
            print(f"unknown table {args.table!r}; known: {', '.join(TABLES)}", file=sys.stderr)
            return 2
        sys.stdout.write(render_block(TABLES[args.table], results_dir, Path.cwd()))
        return 0
    stale = 0
    for name in args.files or [str(BENCHMARKS_DIR / "README.md")]:
        path = Path(name)
        old = path.read_text(encoding="utf-8")
        new = update_markdown(old, TABLES, results_dir, path.resolve().parent)
        if old == new:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), name, "generated"
            )
            sys.stdout.writelines(diff)
        else:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {name}")
    if stale:
        print(f"{stale} file(s) differ from their JSON; run `flinkai bench report`")
    return 1 if stale else 0


def _handle(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except ReportError as e:
        print(f"flinkai bench report: {e}", file=sys.stderr)
        return 2


def register(subparsers: Any) -> None:
    """Add ``flinkai bench report``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="regenerate the markdown tables from the results JSON (--check: verify only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files", nargs="*", help="markdown files to regenerate (default: benchmarks/README.md)"
    )
    p.add_argument(
        "--results",
        default=str(BENCHMARKS_DIR / "results"),
        help="results folder the tables' sources are relative to (default: benchmarks/results)",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    p.add_argument("--table", metavar="NAME", help="print one table's block to stdout")
    p.set_defaults(handler=_handle)
