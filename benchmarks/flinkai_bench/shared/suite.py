"""The benchmark suite: entries, the machine they ran on, and the files a run writes.

A benchmark joins the suite by exposing ``suite_entry`` (a :class:`SuiteEntry`) in its
module and listing the module in :data:`flinkai_bench.BENCHMARKS`. The smallest entry::

    suite_entry = SuiteEntry(
        name="mybench",
        description="One line for the matrix.",
        sizes={"quick": 10, "default": 100, "full": None},  # None: the whole set
        run=lambda size: [{"name": "a", "items_per_s": 12.5}],
        chart=("name", "items_per_s"),
    )

``run(size)`` returns rows (flat dicts, one table) or an :class:`EntryOutput` (several
named tables plus notes). An entry that sets ``repeats`` per profile is called as
``run(size, repeats=n, profile=name)`` and does its own repeating (it knows which figures pair up
within a repeat). A value that is missing says why: put the reason in the cell as
text (``"n/a (no GPU)"``, ``"not run in quick"``); ``None`` prints as ``-``.

:func:`run_suite` runs the entries of one profile in order, with a progress bar, and
writes into the output folder:

- ``results.json``: the machine (CPU model, cores, memory, GPU, versions of flinkai,
  Flink, ONNX Runtime and Python), the profile and every entry's tables and notes;
- ``matrix.md``: the machine, then per entry its notes and tables;
- ``<entry>.png``: a bar chart of the entry's first table when it names a value
  column (rows without a number are left out, never drawn as zero), plus whatever
  the entry's own ``draw`` writes.

An entry that raises is recorded as failed and the others still run.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "PROFILES",
    "EntryOutput",
    "EntryResult",
    "Profile",
    "SuiteEntry",
    "machine_info",
    "not_run",
    "render_matrix",
    "run_suite",
    "short_reason",
    "write_charts",
]

Profile = Literal["quick", "default", "full"]
PROFILES: tuple[Profile, ...] = ("quick", "default", "full")

Row = dict[str, Any]


def not_run(profile: str) -> str:
    """The cell text of a figure a profile leaves out."""
    return f"not run in {profile}"


@dataclass
class EntryOutput:
    """What an entry's ``run`` may return instead of plain rows.

    Attributes:
        tables: Title -> rows, in print order; the first table is the one charted.
        notes: Lines printed above the tables (what each figure means, caveats).
    """

    tables: dict[str, list[Row]]
    notes: list[str] = field(default_factory=list)


@dataclass
class EntryResult:
    """What one entry produced in a run.

    Attributes:
        rows: The first table (what the bar chart draws).
        tables: Every table, by title.
        repeats: How often the entry repeated its measurements (1 unless it sets
            ``repeats``).
    """

    name: str
    description: str
    size: int | None
    seconds: float = 0.0
    rows: list[Row] = field(default_factory=list)
    error: str | None = None
    tables: dict[str, list[Row]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    repeats: int = 1


@dataclass(frozen=True)
class SuiteEntry:
    """One benchmark as the suite sees it.

    Attributes:
        name: Short name (file names, table titles).
        description: One line for the matrix.
        sizes: Problem size per profile (texts, seeds, ...); None means the whole set.
        run: ``run(size)`` (``run(size, repeats=n, profile=name)`` when ``repeats`` is set)
            returns rows (flat dicts) or an :class:`EntryOutput`.
        chart: ``(label column, value column)`` for a bar chart, or None.
        repeats: Repeats per profile; empty: the entry does not repeat.
        draw: Extra charts: ``draw(result, folder)`` writes PNGs and returns their paths.
    """

    name: str
    description: str
    sizes: Mapping[str, int | None]
    run: Callable[..., list[Row] | EntryOutput]
    chart: tuple[str, str] | None = None
    repeats: Mapping[str, int] = field(default_factory=dict)
    draw: Callable[[EntryResult, Path], list[Path]] | None = None

    def size(self, profile: Profile) -> int | None:
        return self.sizes.get(profile)

    def repeat_count(self, profile: Profile) -> int:
        return self.repeats.get(profile, 1)

    def execute(self, profile: Profile) -> EntryOutput:
        """Run at the profile's size (and repeats); plain rows become one table."""
        size = self.size(profile)
        if self.repeats:
            out = self.run(size, repeats=self.repeat_count(profile), profile=profile)
        else:
            out = self.run(size)
        return out if isinstance(out, EntryOutput) else EntryOutput({"": list(out)})


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def machine_info(devices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """CPU, memory, GPU and the versions that matter to the figures.

    Args:
        devices: A device report (:meth:`DeviceReport.as_dict`); probed when None.
    """
    if devices is None:
        from flinkai_bench.shared.devices import SystemProbe

        devices = SystemProbe().report().as_dict()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_avg": list(os.getloadavg()),
        "devices": dict(devices),
        "versions": {
            "flinkai": _version("flinkai"),
            "apache-flink": _version("apache-flink"),
            "onnxruntime": _version("onnxruntime"),
            "onnxruntime-gpu": _version("onnxruntime-gpu"),
            "python": platform.python_version(),
        },
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def render_matrix(results: Sequence[EntryResult], machine: Mapping[str, Any]) -> str:
    """Markdown: the machine, then one table per entry (columns: union of row keys)."""
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items() if v)
    gpus = machine["devices"].get("gpus") or []
    gpu = ", ".join(g["name"] for g in gpus) or "none"
    lines = [
        "# Benchmark matrix",
        "",
        f"Machine: {machine['cpu_model']}, {machine['cpu_cores']} cores, "
        f"{_cell(machine['memory_gib'])} GiB; GPU: {gpu}. {versions}.",
    ]
    for result in results:
        runs = "" if result.repeats == 1 else f", {result.repeats} repeats"
        lines += [
            "",
            f"## {result.name} (size {_cell(result.size)}{runs}, {result.seconds:.0f} s)",
            "",
        ]
        lines.append(result.description)
        if result.error:
            lines += ["", f"failed: {result.error}"]
            continue
        lines += [f"\n{note}" for note in result.notes]
        tables = result.tables or {"": result.rows}
        if not any(tables.values()):
            lines += ["", "no rows"]
            continue
        for title, rows in tables.items():
            if title:
                lines += ["", f"### {title}"]
            lines += ["", *_table(rows)]
    return "\n".join(lines) + "\n"


#: A reason up to this long may stand in a cell; a longer one is said once, in the note.
SHORT_REASON = 24


def short_reason(value: Any, note: Any) -> Any:
    """A cell that repeats (part of) its row's note, cut to the reason's first words.

    ``"n/a (variant 'int8' has not been exported ...)"`` becomes ``"n/a"`` when the
    row's ``note`` already says it, so an unavailable row reads as one reason in its
    note column and a short word in each cell, not 20 copies of the reason.
    """
    if not (isinstance(value, str) and isinstance(note, str)) or len(value) <= SHORT_REASON:
        return value
    if value not in note:
        return value
    return value.split(" (", 1)[0].split(":", 1)[0].strip() or value


def _table(rows: Sequence[Row]) -> list[str]:
    if not rows:
        return ["no rows"]
    columns = list(dict.fromkeys(k for row in rows for k in row))

    def cell(row: Row, column: str) -> str:
        value = row.get(column)
        if column != "note":
            value = short_reason(value, row.get("note"))
        return _cell(value)

    return [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows),
    ]


def write_charts(
    entries: Iterable[SuiteEntry], results: Sequence[EntryResult], out: Path
) -> list[Path]:
    """One horizontal bar chart per entry with a chart spec and at least one value."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a server
    import matplotlib.pyplot as plt

    by_name = {r.name: r for r in results}
    written = []
    for entry in entries:
        result = by_name.get(entry.name)
        if result is None or result.error:
            continue
        if entry.draw is not None:
            try:
                written += entry.draw(result, out)
            except Exception as e:  # a chart must not lose the results already written
                result.notes.append(f"charts failed: {type(e).__name__}: {e}")
        if entry.chart is None:
            continue
        label, value = entry.chart
        points = [
            (str(r.get(label)), float(r[value]))
            for r in result.rows
            if isinstance(r.get(value), int | float)
        ]
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(8, 0.4 * len(points) + 1.2))
        ax.barh([p[0] for p in points], [p[1] for p in points])
        ax.invert_yaxis()
        ax.set_xlabel(value)
        ax.set_title(entry.name)
        fig.tight_layout()
        path = out / f"{entry.name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def run_suite(
    entries: Sequence[SuiteEntry],
    profile: Profile,
    out: Path,
    *,
    machine: Mapping[str, Any] | None = None,
    charts: bool = True,
) -> list[EntryResult]:
    """Run every entry at the profile's size and write the results into ``out``."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    info = dict(machine) if machine is not None else machine_info()
    started = time.time()
    results: list[EntryResult] = []
    bar = tqdm(entries, desc=f"suite ({profile})", unit="benchmark")
    for entry in bar:
        bar.set_postfix_str(entry.name)
        result = EntryResult(
            entry.name,
            entry.description,
            entry.size(profile),
            repeats=entry.repeat_count(profile),
        )
        t0 = time.perf_counter()
        try:
            output = entry.execute(profile)
            result.tables, result.notes = output.tables, output.notes
            result.rows = next(iter(output.tables.values()), [])
        except Exception as e:  # one broken benchmark must not lose the others' rows
            result.error = f"{type(e).__name__}: {e}"
        result.seconds = time.perf_counter() - t0
        results.append(result)
        # Charts, then the files, after every entry, so a run stopped midway keeps what
        # finished; a chart that fails leaves a note in the files.
        if charts:
            write_charts([entry], [result], out)
        _write(out, profile, started, info, results)
    return results


def _write(
    out: Path,
    profile: Profile,
    started: float,
    info: Mapping[str, Any],
    results: Sequence[EntryResult],
) -> None:
    payload = {
        "profile": profile,
        "started": started,
        "seconds": time.time() - started,
        "machine": info,
        "benchmarks": [r.__dict__ for r in results],
    }
    (out / "results.json").write_text(json.dumps(payload, indent=2, default=str))
    (out / "matrix.md").write_text(render_matrix(results, info))
