"""The embed benchmark in ``flinkai bench suite``: the processor x backend x precision matrix.

Every processor row (raw ORT loop, the Flink job, the naive PyFlink UDF, Beam
RunInference) embeds the same texts, as many in each row, and reports the same two
figures:

- *steady texts/s*: start-up excluded, counted after the first output (the job's first
  flush, the loop's first batch, Beam's first output batch);
- *time to all results*: start-up included, from job submission / session create /
  pipeline start to the last result.

Each repeat runs every row once, so a ratio pairs two rows measured minutes apart
under the same load; the headline ratios are the median of the repeats with min and
max (:mod:`flinkai_bench.shared.repeats`). Matrix cells are medians over the repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkai_bench.embed.gpu import plan_gpu_rows
from flinkai_bench.embed.harness import run_variant
from flinkai_bench.embed.results import JobSettings, VariantResult
from flinkai_bench.embed.stats import half_rate
from flinkai_bench.shared.devices import DeviceReport, SystemProbe
from flinkai_bench.shared.repeats import Spread, ratio_spread, spread
from flinkai_bench.shared.suite import EntryOutput, EntryResult, Row, SuiteEntry, not_run

__all__ = ["SUITE_JOB", "ProfilePlan", "headline_rows", "matrix_rows", "suite_entry"]

#: Job settings of the suite's job rows. Arrow batch 256 (not the shipped 1024) so that
#: the quick profile's 512 texts give two output flushes, i.e. a steady rate; the
#: shipped default is measured by ``flinkai bench embed`` on 3,800 texts.
SUITE_JOB = JobSettings(arrow_batch=256, bundle=256, model_batch=32, ort_threads=0)
RAW_BATCH = 32
BEAM_BATCH = 64


@dataclass(frozen=True)
class ProfilePlan:
    """What a profile runs beyond its size and repeats."""

    latency_warmup_s: float
    latency_duration_s: float
    #: Extra latency runs (fractions of the job's steady rate) in the first repeat:
    #: with 0.5 they make the latency-vs-rate curve.
    curve_fractions: tuple[float, ...]
    triton: bool
    #: A row's child process (with its broker and JVM) is killed after this long.
    row_timeout_s: float


PLANS: dict[str, ProfilePlan] = {
    "quick": ProfilePlan(5.0, 15.0, (), triton=False, row_timeout_s=600.0),
    "default": ProfilePlan(10.0, 40.0, (0.25, 0.75), triton=True, row_timeout_s=1800.0),
    "full": ProfilePlan(10.0, 40.0, (0.25, 0.75), triton=True, row_timeout_s=1800.0),
}

#: Checkpoint timeout of the suite's job rows. A checkpoint barrier waits for the Python
#: bundle in flight; on a loaded 2-core machine a 256-text bundle took over the default
#: 60 s, the checkpoint expired and the job failed over (2026-12-03, load 10-13). 120 s
#: keeps the worst-case commit delay (5 s + 120 s + 5 x (2 s + 120 s)) under the job's
#: 900 s transaction timeout, which the guarantee check requires.
SUITE_CHECKPOINT_TIMEOUT_MS = 120_000

#: Bundle of the naive row. Its UDF calls the model once per row, so the bundle only sets
#: how often results flush: a 256-row bundle of per-row torch calls outlasted the
#: checkpoint timeout under load (the row then failed over and timed out at 600 s), and
#: with fewer texts than one bundle there are not two flushes to take a steady rate from.
NAIVE_BUNDLE = 32


@dataclass(frozen=True)
class RowKey:
    """Where a row sits in the matrix."""

    processor: str
    backend: str
    precision: str


RAW_FP32 = RowKey("raw ORT loop", "ORT CPU", "fp32")
RAW_INT8 = RowKey("raw ORT loop", "ORT CPU", "int8")
JOB = RowKey("Flink job", "ORT CPU", "fp32")
NAIVE = RowKey("naive PyFlink UDF", "sentence-transformers", "fp32")
BEAM = RowKey("Beam RunInference", "ORT CPU", "fp32")
TRITON = RowKey("raw Triton client loop", "Triton gRPC", "fp32")

Runner = Callable[[str, int | None, dict[str, Any]], VariantResult]


def _job_overrides() -> dict[str, dict[str, Any]]:
    overrides = SUITE_JOB.overrides()
    overrides["runtime"]["checkpoint_timeout_ms"] = SUITE_CHECKPOINT_TIMEOUT_MS
    return overrides


def _naive_overrides(overrides: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    runtime = {
        **overrides["runtime"],
        "arrow_batch_size": NAIVE_BUNDLE,
        "python_bundle_size": NAIVE_BUNDLE,
    }
    return {**overrides, "runtime": runtime}


def _repeat(
    limit: int | None, plan: ProfilePlan, first: bool, run: Runner
) -> tuple[dict[RowKey, VariantResult], list[VariantResult]]:
    """One repeat: every processor row once, then the job's latency at half its rate."""
    from flinkai.paths import bundled_udf_dir
    from flinkai_bench.embed.variants import repo

    overrides = _job_overrides()
    raw = {"batch_size": RAW_BATCH, "sort_window": SUITE_JOB.bundle}
    rows: dict[RowKey, VariantResult] = {
        # The raw loop sorts by length only within windows of the job's bundle size:
        # like the job, it cannot batch short texts of one bundle with those of the next.
        RAW_FP32: run("raw_ort", limit, {**raw, "variant": "fp32"}),
        RAW_INT8: run("raw_ort", limit, {**raw, "variant": "int8"}),
        JOB: run("job", limit, {"name": f"job {SUITE_JOB.label}", "overrides": overrides}),
        NAIVE: run(
            "job",
            limit,
            {
                "name": "naive PyFlink UDF (row-at-a-time sentence-transformers)",
                "overrides": _naive_overrides(overrides),
                "variables": {"EMBED_FUNCTION": "naive.text_to_vector_naive"},
                "udf_dirs": [str(bundled_udf_dir()), str(repo() / "benchmarks" / "baseline_udfs")],
            },
        ),
        BEAM: run("beam", limit, {"batch_size": BEAM_BATCH}),
    }
    lat_overrides = {**overrides, "runtime": {**overrides["runtime"], "python_bundle_time_ms": 50}}
    latency: list[VariantResult] = []
    fractions = (0.5, *plan.curve_fractions) if first else (0.5,)
    for fraction in fractions:
        rate = half_rate(rows[JOB].texts_per_s, fraction)
        name = f"job latency at {fraction:.0%} of its steady rate, at-least-once"
        if rate is None:
            latency.append(VariantResult(name, note="n/a (no steady job rate in this repeat)"))
            continue
        result = run(
            "latency",
            limit,
            {
                "name": name,
                "overrides": lat_overrides,
                "guarantee": "at-least-once",
                "rate": rate,
                "duration_s": plan.latency_duration_s,
                "warmup_s": plan.latency_warmup_s,
            },
        )
        result.extra["fraction"] = fraction
        latency.append(result)
    return rows, latency


def _median(values: Sequence[float | None]) -> float | None:
    s = spread(values)
    return s.median if s is not None else None


def _why(results: Sequence[VariantResult]) -> str:
    """The reason a row has no figure: its first note that says n/a or failed."""
    for r in results:
        if r.note.startswith(("n/a", "failed", "incomplete", "not run")):
            return r.note
    return "n/a"


def _cell(why: str) -> str:
    """The reason as a cell shows it: GPU rows repeat one long probe message in every
    column, so cells say "n/a (no GPU)" and the note column keeps the whole reason."""
    return "n/a (no GPU)" if why.startswith("n/a (no GPU") else why


def _num(values: Sequence[float | None], why: str) -> float | str:
    median = _median(values)
    return median if median is not None else why


def _errors(r: VariantResult) -> int | str:
    if r.note.startswith("failed"):
        return "run failed"
    if r.note.startswith(("n/a", "not run")):
        return _cell(r.note)
    if "dead_letters" in r.extra:
        return int(r.extra["dead_letters"]) + int(r.extra.get("missing", 0))
    if "outputs" in r.extra:  # Beam: results that never came
        return r.texts - int(r.extra["outputs"])
    return 0


def _gpu_cell(report: DeviceReport) -> str:
    return "n/a (no GPU)" if not report.gpus else "n/a (CPU row)"


def matrix_rows(
    runs: Sequence[dict[RowKey, VariantResult]],
    latency: Sequence[Sequence[VariantResult]],
    once: Sequence[tuple[RowKey, VariantResult]],
    report: DeviceReport,
    profile: str,
) -> list[Row]:
    """One row per processor x backend x precision; every cell a median or a reason.

    Args:
        runs: Per repeat, the processor rows.
        latency: Per repeat, the latency runs (the first at half the job's rate).
        once: Rows measured once (GPU, Triton), with their key.
        report: The device probe's report (for the GPU memory cells).
        profile: The profile name, for "not run in ..." cells.
    """
    keys = list(dict.fromkeys(k for run in runs for k in run))
    table: list[Row] = []
    half = [next((r for r in lat if r.extra.get("fraction") == 0.5), None) for lat in latency]
    series = [(k, [run[k] for run in runs if k in run]) for k in keys]
    series += [(k, [r]) for k, r in once]
    for key, results in series:
        why = _cell(_why(results))
        first = results[0]
        phases = [r.extra.get("cold_start_s") or {} for r in results]
        startup = [r.extra.get("first_output_s", r.extra.get("first_output_after_submit_s"))
                   for r in results]  # fmt: skip
        is_gpu = key.backend.startswith("ORT CUDA") or key.backend.startswith("ORT TensorRT")
        row: Row = {
            "processor": key.processor,
            "backend": key.backend,
            "precision": key.precision,
            "texts": first.texts or "-",
            "steady texts/s": _num([r.texts_per_s for r in results], why),
            "time to all results s": _num([r.all_results_s for r in results], why),
            "start-up to 1st result s": _num(startup, why),
        }
        if key == JOB:
            lat_why = _why([r for r in half if r is not None]) if any(half) else not_run(profile)
            row["latency at rate /s"] = _num([r.texts_per_s if r else None for r in half], lat_why)
            for p in ("p50", "p95", "p99"):
                row[f"{p} ms"] = _num(
                    [(r.extra.get("latency") or {}).get(f"{p}_ms") if r else None for r in half],
                    lat_why,
                )
        else:
            why_lat = "n/a (bulk run; per-event latency is measured on the job)"
            row["latency at rate /s"] = why_lat
            for p in ("p50", "p95", "p99"):
                row[f"{p} ms"] = why_lat
        if key in (JOB, NAIVE, BEAM, TRITON):
            inside = "the Triton server" if key == TRITON else "the runtime"
            why_cold = f"n/a (not separable outside {inside}; see start-up)"
            cold: dict[str, float | str] = {"CUDA context": "n/a (CPU)"}
            cold.update({c: why_cold for c in ("model load", "tokenizer", "first inference")})
        else:
            pick: dict[str, tuple[str, ...]] = {
                "CUDA context": ("cuda_context",),
                "model load": ("session_create", "model_load"),
                "tokenizer": ("tokenizer_load",),
                "first inference": ("first_batch", "first_inference"),
            }
            cold = {}
            for column, names in pick.items():
                if column == "CUDA context" and not is_gpu:
                    cold[column] = "n/a (CPU)"
                    continue
                cold[column] = _num(
                    [next((ph[n] for n in names if ph.get(n) is not None), None) for ph in phases],
                    why,
                )
        row.update({f"cold start: {k} s": v for k, v in cold.items()})
        row["peak RSS MB"] = _num([r.peak_rss_mb for r in results], why)
        if is_gpu:
            row["peak GPU MB"] = _num(
                [(r.extra.get("gpu_memory_mb") or {}).get("peak_used") for r in results], why
            )
        else:
            row["peak GPU MB"] = _gpu_cell(report)
        row["CPU ms/text"] = _num([r.extra.get("cpu_ms_per_text") for r in results], why)
        row["errors"] = _errors(first) if len(results) == 1 else _sum_errors(results)
        row["note"] = first.note
        table.append(row)
    return table


def _sum_errors(results: Sequence[VariantResult]) -> int | str:
    counts = [_errors(r) for r in results]
    if all(isinstance(c, int) for c in counts):
        return sum(int(c) for c in counts)
    return "; ".join(str(c) for c in counts)


#: (label, numerator, denominator, figure) of the headline ratios.
_RATIOS: tuple[tuple[str, RowKey, RowKey], ...] = (
    ("job / raw ORT fp32", JOB, RAW_FP32),
    ("job / Beam RunInference", JOB, BEAM),
    ("job / naive UDF", JOB, NAIVE),
    ("raw ORT int8 / fp32", RAW_INT8, RAW_FP32),
)


def _end_to_end(r: VariantResult | None) -> float | None:
    if r is None or not r.all_results_s or not r.texts:
        return None
    return r.texts / r.all_results_s


def headline_rows(
    runs: Sequence[dict[RowKey, VariantResult]], latency: Sequence[Sequence[VariantResult]]
) -> list[Row]:
    """The headline ratios, each as median/min/max over the repeats, per figure."""
    out: list[Row] = []

    def add(label: str, figure: str, s: Spread | None, unit: str = "x") -> None:
        out.append(
            {
                "ratio": label,
                "figure": figure,
                "median": s.median if s else "n/a (no repeat gave both figures)",
                "min": s.min if s else "-",
                "max": s.max if s else "-",
                "repeats with a value": f"{s.n} of {s.repeats}" if s else f"0 of {len(runs)}",
                "per repeat": ", ".join(f"{v:.3g}" for v in s.values) if s else "-",
                "unit": unit,
            }
        )

    for label, a, b in _RATIOS:
        num = [run.get(a) for run in runs]
        den = [run.get(b) for run in runs]
        add(
            label,
            "steady texts/s (start-up excluded)",
            ratio_spread(
                [r.texts_per_s if r else None for r in num],
                [r.texts_per_s if r else None for r in den],
            ),
        )
        add(
            label,
            "texts / time to all results (start-up included)",
            ratio_spread([_end_to_end(r) for r in num], [_end_to_end(r) for r in den]),
        )
    half = [next((r for r in lat if r.extra.get("fraction") == 0.5), None) for lat in latency]
    add(
        "job p99 at half its steady rate, at-least-once",
        "per-event latency, paced input",
        spread([(r.extra.get("latency") or {}).get("p99_ms") if r else None for r in half]),
        unit="ms",
    )
    return out


def _run_rows(
    runs: Sequence[dict[RowKey, VariantResult]], latency: Sequence[Sequence[VariantResult]]
) -> list[Row]:
    """Every measured run, per repeat: the raw figures behind the medians."""
    rows: list[Row] = []
    for i, (run, lat) in enumerate(zip(runs, latency, strict=True), start=1):
        for r in [*run.values(), *lat]:
            lat_data = r.extra.get("latency") or {}
            rows.append(
                {
                    "repeat": i,
                    "name": r.name,
                    "texts": r.texts,
                    "steady texts/s": r.texts_per_s,
                    "time to all results s": r.all_results_s,
                    "p50 ms": r.p50_ms,
                    "p95 ms": lat_data.get("p95_ms"),
                    "p99 ms": r.p99_ms,
                    "peak RSS MB": r.peak_rss_mb,
                    "CPU ms/text": r.extra.get("cpu_ms_per_text"),
                    "note": r.note,
                }
            )
    return rows


def _once(limit: int | None, plan: ProfilePlan, report: DeviceReport, profile: str,
          run: Runner) -> list[tuple[RowKey, VariantResult]]:  # fmt: skip
    """GPU rows (n/a with the reason where no GPU) and the Triton row, measured once."""
    rows: list[tuple[RowKey, VariantResult]] = []
    for gpu_row, reason in plan_gpu_rows(report):
        provider = "ORT CUDA" if gpu_row.provider == "cuda" else "ORT TensorRT"
        key = RowKey("raw ORT loop (backend)", provider, gpu_row.variant)
        if reason:
            rows.append((key, VariantResult(gpu_row.label, note=f"n/a ({reason})")))
        else:
            args = {"name": gpu_row.label, "provider": gpu_row.provider, "variant": gpu_row.variant}
            rows.append((key, run("raw_ort_gpu", limit, args)))
    if not plan.triton:
        rows.append((TRITON, VariantResult("raw Triton client loop", note=not_run(profile))))
    else:
        rows.append(
            (
                TRITON,
                run(
                    "raw_triton",
                    limit,
                    {
                        "name": "raw Triton gRPC client loop (local server)",
                        "overrides": _job_overrides(),
                        "chunk": SUITE_JOB.arrow_batch,
                    },
                ),
            )
        )
    return rows


def run_embed_suite(
    limit: int | None,
    repeats: int = 1,
    profile: str = "default",
    *,
    run: Runner | None = None,
    report: DeviceReport | None = None,
) -> EntryOutput:
    """Run the repeats and build the matrix, the headline ratios and the raw runs."""
    from tqdm import tqdm

    plan = PLANS.get(profile, PLANS["default"])
    report = report or SystemProbe().report()
    if run is None:

        def run(kind: str, size: int | None, args: dict[str, Any]) -> VariantResult:
            return run_variant(kind, size, args, timeout_s=plan.row_timeout_s)

    total = repeats * 6 + len(plan.curve_fractions) + 5
    with tqdm(total=total, desc="embed runs", unit="run", leave=False) as bar:

        def step(kind: str, size: int | None, args: dict[str, Any]) -> VariantResult:
            bar.set_postfix_str(str(args.get("name") or kind)[:40])
            try:
                return run(kind, size, args)
            finally:
                bar.update()

        runs, latency = [], []
        for i in range(repeats):
            rows, lat = _repeat(limit, plan, i == 0, step)
            runs.append(rows)
            latency.append(lat)
        once = _once(limit, plan, report, profile, step)
    notes = [
        f"Every processor row embeds the same {limit or 'all 3,800'} AG News texts; "
        f"{repeats} repeat(s)"
        + (" (the default profile runs 3)" if repeats < 3 else "")
        + "; matrix cells are medians over the repeats.",
        "steady texts/s: start-up excluded (counted after the first output: the job's "
        "first flush, the loop's first batch, Beam's first output batch). time to all "
        "results: start-up included (job submission / session create / pipeline start to "
        "the last result). Each headline ratio is given for both figures and names it.",
        f"Job rows: settings {SUITE_JOB.label} (arrow/bundle/batch/threads), exactly-once "
        f"Kafka in and out, checkpoint timeout {SUITE_CHECKPOINT_TIMEOUT_MS // 1000} s; "
        f"a row is killed after {plan.row_timeout_s:.0f} s; the naive row's bundle is "
        f"{NAIVE_BUNDLE} rows (its UDF is row-at-a-time either way); bounded job rows run "
        "without restarts (a restored bounded Kafka source never finishes: FLINK-31006), so "
        f"a failover fails the row with its reason; raw ORT loop batch {RAW_BATCH}; Beam DirectRunner batch "
        f"{BEAM_BATCH}, texts padded to one length. Latency: the job paced at half its "
        f"steady rate of the same repeat, {plan.latency_warmup_s:.0f} s paced warm-up, "
        f"{plan.latency_duration_s:.0f} s measured, at-least-once, bundle time 50 ms.",
        "Cold start phases for the job, naive and Beam rows are not separable from outside "
        "the runtime; their start-up to the first result is in its own column.",
    ]
    return EntryOutput(
        {
            "matrix": matrix_rows(runs, latency, once, report, profile),
            "headline ratios (median of repeats, min, max)": headline_rows(runs, latency),
            "runs": _run_rows(runs, latency),
            "latency vs rate": [
                {
                    "repeat": i,
                    "fraction of steady rate": r.extra.get("fraction"),
                    "rate /s": r.texts_per_s,
                    "p50 ms": r.p50_ms,
                    "p95 ms": (r.extra.get("latency") or {}).get("p95_ms"),
                    "p99 ms": r.p99_ms,
                    "note": r.note,
                }
                for i, lat in enumerate(latency, start=1)
                for r in lat
            ],
        },
        notes,
    )


def _run(size: int | None, repeats: int = 1, profile: str = "default") -> EntryOutput:
    return run_embed_suite(size, repeats, profile)


def _label(row: Row) -> str:
    return f"{row['processor']}, {row['backend']} {row['precision']}"


def draw_charts(result: EntryResult, out: Path) -> list[Path]:
    """Throughput (both figures), latency vs rate, cold start by phase, memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = result.tables.get("matrix", [])
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / f"embed-{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    rows = [r for r in matrix if number(r.get("steady texts/s")) is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
        y = np.arange(len(rows))
        steady = [number(r["steady texts/s"]) or 0.0 for r in rows]
        e2e = [
            (r["texts"] / t) if (t := number(r.get("time to all results s"))) else 0.0 for r in rows
        ]
        ax.barh(y - 0.2, steady, 0.4, label="steady (start-up excluded)")
        ax.barh(y + 0.2, e2e, 0.4, label="texts / time to all results (start-up included)")
        ax.set_yticks(y, [_label(r) for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("texts/s (median of repeats)")
        ax.set_title("embed throughput per processor and backend")
        ax.legend(loc="lower right", fontsize=8)
        save(fig, "throughput")
    points = [
        r
        for r in result.tables.get("latency vs rate", [])
        if number(r.get("rate /s")) and number(r.get("p99 ms"))
    ]
    if points:
        points.sort(key=lambda r: r["rate /s"])
        fig, ax = plt.subplots(figsize=(7, 4))
        rates = [r["rate /s"] for r in points]
        for key, style in (("p50 ms", "o-"), ("p95 ms", "s--"), ("p99 ms", "^-")):
            values = [number(r.get(key)) for r in points]
            if any(v is not None for v in values):
                ax.plot(rates, [np.nan if v is None else v for v in values], style, label=key)
        ax.set_xlabel("paced input rate (events/s)")
        ax.set_ylabel("per-event latency (ms)")
        ax.set_title("job latency vs input rate (at-least-once)")
        ax.legend()
        save(fig, "latency")
    phases = ("model load", "tokenizer", "first inference", "CUDA context")
    cold = [r for r in matrix if any(number(r.get(f"cold start: {p} s")) for p in phases)]
    start = [r for r in matrix if r not in cold and number(r.get("start-up to 1st result s"))]
    if cold or start:
        labels = [_label(r) for r in [*cold, *start]]
        fig, ax = plt.subplots(figsize=(9, 0.5 * len(labels) + 1.5))
        left = np.zeros(len(labels))
        for phase in ("CUDA context", *phases[:3]):
            widths = [number(r.get(f"cold start: {phase} s")) or 0.0 for r in cold] + [0.0] * len(
                start
            )
            ax.barh(labels, widths, left=left, label=phase)
            left += np.asarray(widths)
        whole = [0.0] * len(cold) + [number(r["start-up to 1st result s"]) or 0.0 for r in start]
        ax.barh(labels, whole, left=left, label="start-up to 1st result (not split)")
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        ax.set_title("cold start by phase")
        ax.legend(fontsize=8)
        save(fig, "cold-start")
    mem = [r for r in matrix if number(r.get("peak RSS MB"))]
    if mem:
        fig, ax = plt.subplots(figsize=(9, 0.5 * len(mem) + 1.5))
        labels = [_label(r) for r in mem]
        ax.barh(labels, [number(r["peak RSS MB"]) or 0.0 for r in mem], label="peak host RSS")
        gpu = [number(r.get("peak GPU MB")) or 0.0 for r in mem]
        if any(gpu):
            ax.barh(labels, gpu, label="peak GPU memory (NVML)")
        ax.invert_yaxis()
        ax.set_xlabel("MB (process tree: Kafka, JVM, Python workers included)")
        ax.set_title("peak memory" + ("" if any(gpu) else " (no GPU: host RSS only)"))
        ax.legend(fontsize=8)
        save(fig, "memory")
    return written


#: Quick: 512 AG News texts, one repeat; default: 1,200 texts, three repeats; full: all
#: 3,800, three repeats.
suite_entry = SuiteEntry(
    name="embed",
    description="Embedding: raw ORT loop (fp32, int8), Flink job, naive PyFlink UDF, Beam "
    "RunInference on the same texts; GPU and Triton rows; latency at half the job's rate.",
    sizes={"quick": 512, "default": 1200, "full": None},
    run=_run,
    repeats={"quick": 1, "default": 3, "full": 3},
    draw=draw_charts,
)
