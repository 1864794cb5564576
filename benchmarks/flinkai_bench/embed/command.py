"""``flinkai bench embed``: the command, its steps and its JSON."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.paths import bundled_udf_dir
from flinkai_bench.embed.gpu import plan_gpu_rows
from flinkai_bench.embed.harness import run_variant
from flinkai_bench.embed.results import JobSettings, VariantResult, fmt, print_table
from flinkai_bench.embed.stats import (
    half_rate,
)
from flinkai_bench.embed.variants import repo
from flinkai_bench.shared.devices import SystemProbe

__all__ = ["ALL_VARIANTS", "register"]

#: Flink options of the latency runs, on top of the job settings and the bundle time.
LATENCY_FLINK_CONF: tuple[str, ...] = ()

ALL_VARIANTS = ("raw", "gpu", "job", "triton", "latency", "naive", "beam")


class _Steps:
    """Runs variants one after another, printing progress; keeps the rows."""

    def __init__(self) -> None:
        self.rows: list[VariantResult] = []

    def __call__(self, kind: str, limit: int | None, **kw: Any) -> VariantResult:
        name = kw.setdefault("name", kind)
        print(f"[{len(self.rows) + 1}] {name} on {limit or 'all'} texts ...", flush=True)
        t0 = time.monotonic()
        result = run_variant(kind, limit, kw)
        print(
            f"    {fmt(result.texts_per_s)} texts/s, p50 {fmt(result.p50_ms)} ms, "
            f"p99 {fmt(result.p99_ms)} ms, CPU {fmt(result.extra.get('cpu_ms_per_text'))} "
            f"ms/text ({time.monotonic() - t0:.0f} s) {result.note}",
            flush=True,
        )
        self.rows.append(result)
        return result

    def na(self, name: str, reason: str) -> VariantResult:
        result = VariantResult(name, note=f"n/a ({reason})")
        self.rows.append(result)
        return result


def _job_row_name(settings: JobSettings, backend: str = "ORT") -> str:
    what = "threads" if settings.parallelism == 1 else "threads/parallelism"
    return f"job, {backend} (arrow/bundle/batch/{what} {settings.label})"


def _ratio(a: VariantResult | None, b: VariantResult | None) -> float | None:
    if a is None or b is None or not a.texts_per_s or not b.texts_per_s:
        return None
    return a.texts_per_s / b.texts_per_s


def _write_json(path: str, payload: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {path}")


def _bench(args: argparse.Namespace) -> int:
    if args.tune:
        return _tune(args)
    root = repo()
    variants = set(args.variants)
    settings: JobSettings = args.job
    overrides = settings.overrides()
    step = _Steps()
    print(
        f"job settings: arrow batch {settings.arrow_batch}, bundle {settings.bundle}, "
        f"model batch {settings.model_batch}, ORT intra-op threads {settings.ort_threads}, "
        f"parallelism {settings.parallelism}",
        flush=True,
    )

    best: VariantResult | None = None
    if "raw" in variants:
        # Sorted only within windows of the job's bundle, as the job can sort.
        raws = [
            step(
                "raw_ort",
                args.limit,
                batch_size=b,
                threads=args.threads,
                sort_window=settings.bundle,
            )
            for b in args.batch_sizes
        ]
        best = max(
            (r for r in raws if r.texts_per_s), key=lambda r: r.texts_per_s or 0.0, default=None
        )
        if best is not None:
            best.name += " (best)"
    job = raw_triton = job_triton = naive = beam = None
    if "job" in variants:
        job = step(
            "job",
            args.limit,
            name=_job_row_name(settings),
            overrides=overrides,
            two_run=args.two_run,
        )
    extra_jobs = [
        step("job", args.limit, name=_job_row_name(s), overrides=s.overrides())
        for s in args.extra_jobs
        if "job" in variants
    ]
    if "triton" in variants:
        raw_triton = step(
            "raw_triton",
            args.limit,
            name="raw Triton gRPC client loop (local server), length-sorted",
            overrides=overrides,
            chunk=settings.arrow_batch,
        )
        job_triton = step(
            "job",
            args.limit,
            name=_job_row_name(settings, "triton gRPC backend"),
            overrides=overrides,
            backend="triton",
        )
    latency_rows: list[VariantResult] = []
    if "latency" in variants:
        # (rate, label, where the rate came from): a fraction of the job row's rate, or
        # fixed rates, e.g. a latency-vs-rate curve without the job row
        paces: list[tuple[float | None, str, str | None]] = [
            (
                half_rate(job.texts_per_s if job else None, args.latency_fraction),
                f"{args.latency_fraction:.0%} of max rate",
                job.name if job else None,
            )
        ]
        if args.latency_rate:
            paces = [(r, f"{r:g}/s", None) for r in args.latency_rate]
        lat_overrides = {
            **overrides,
            "runtime": {
                **overrides["runtime"],
                "python_bundle_time_ms": args.latency_bundle_time_ms,
                "flink_conf": dict(kv.split("=", 1) for kv in args.latency_flink_conf),
            },
        }
        for (rate, pct, max_rate_from), (guarantee, label) in itertools.product(
            paces,
            (
                ("at-least-once", "at-least-once, read_uncommitted"),
                ("exactly-once", "exactly-once, read_committed"),
            ),
        ):
            if guarantee not in args.latency_guarantees:
                continue
            name = f"job latency at {pct}, {label}"
            if rate is None:
                latency_rows.append(step.na(name, "no job throughput measured in this run"))
                continue
            latency_rows.append(
                step(
                    "latency",
                    args.limit,
                    name=name,
                    overrides=lat_overrides,
                    guarantee=guarantee,
                    rate=rate,
                    max_rate_from=max_rate_from,
                    duration_s=args.latency_duration_s,
                    warmup_s=args.latency_warmup_s,
                )
            )
    if "naive" in variants:
        naive = step(
            "job",
            args.naive_limit,
            name="naive PyFlink UDF (row-at-a-time sentence-transformers)",
            overrides=overrides,
            variables={"EMBED_FUNCTION": "naive.text_to_vector_naive"},
            udf_dirs=[str(bundled_udf_dir()), str(root / "benchmarks" / "baseline_udfs")],
        )
    if "beam" in variants:
        beam = step("beam", args.slow_limit, name="Apache Beam RunInference", batch_size=64)
    if "gpu" in variants:
        for row, reason in plan_gpu_rows(SystemProbe().report()):
            if reason:
                step.na(row.label, reason)
            else:
                step(
                    "raw_ort_gpu",
                    args.limit,
                    name=row.label,
                    provider=row.provider,
                    variant=row.variant,
                    batch_size=max(args.batch_sizes),
                )
    rows = step.rows
    print()
    print_table(rows)
    ratios = {
        "job / best raw ORT": _ratio(job, best),
        "job / naive UDF": _ratio(job, naive),
        "job / Beam RunInference": _ratio(job, beam),
        "job triton / raw Triton client": _ratio(job_triton, raw_triton),
        "job triton / job ORT": _ratio(job_triton, job),
    }
    for extra_job in extra_jobs:
        ratios[f"{extra_job.name} / best raw ORT"] = _ratio(extra_job, best)
    ratios = {k: v for k, v in ratios.items() if v is not None}
    if ratios:
        print()
        for k, v in ratios.items():
            print(f"{k:<40} {v:.2f}x")
        counts = {r.texts for r in (job, naive, beam, best) if r is not None and r.texts}
        print(
            "ratios use steady texts/s (start-up excluded; time to all results is in the "
            "JSON as all_results_s)"
            + (
                f"; rows ran on {sorted(counts)} texts, so ratios across counts are not like "
                "for like (flinkai bench suite runs every row on the same texts)"
                if len(counts) > 1
                else ""
            )
        )
    if latency_rows:
        print("\nlatency settings:")
        for r in latency_rows:
            s = r.extra.get("settings")
            if s:
                print(f"  {r.name}: {json.dumps(s)}")
    if args.json:
        _write_json(
            args.json,
            {
                "rows": [asdict(r) for r in rows],
                "ratios": ratios,
                "job_settings": asdict(settings),
                "run_id": uuid.uuid4().hex[:8],
                "cpu_count": os.cpu_count(),
                "load_avg": os.getloadavg(),
            },
        )
    return 0


def _tune(args: argparse.Namespace) -> int:
    """Job settings grid: each job's steady rate as a ratio to raw ORT runs of the same run."""
    step = _Steps()
    grid: list[JobSettings] = args.grid or [args.job]
    raw_batch = args.batch_sizes[0] if len(args.batch_sizes) == 1 else 32
    window = grid[0].bundle  # the job sorts within its bundle; so does the limit
    raws = [
        step("raw_ort", args.limit, batch_size=raw_batch, threads=args.threads, sort_window=window)
    ]
    jobs = []
    for i, settings in enumerate(grid):
        jobs.append(
            step("job", args.limit, name=_job_row_name(settings), overrides=settings.overrides())
        )
        if i % 3 == 2 and i != len(grid) - 1:  # re-measure the limit: the machine is shared
            raws.append(
                step(
                    "raw_ort",
                    args.limit,
                    batch_size=raw_batch,
                    threads=args.threads,
                    sort_window=window,
                )
            )
    raws.append(
        step("raw_ort", args.limit, batch_size=raw_batch, threads=args.threads, sort_window=window)
    )
    raw_rates = [r.texts_per_s for r in raws if r.texts_per_s]
    raw_mean = float(np.mean(raw_rates)) if raw_rates else None
    raw_cpus = [c for r in raws if (c := r.extra.get("cpu_ms_per_text"))]
    raw_cpu = float(np.mean(raw_cpus)) if raw_cpus else None
    print()
    print_table(step.rows)
    print(
        f"\nraw ORT batch {raw_batch}: "
        + ", ".join(f"{r:.1f}" for r in raw_rates)
        + f" texts/s (mean {fmt(raw_mean)}); CPU ms/text "
        + ", ".join(f"{c:.1f}" for c in raw_cpus)
    )
    print(
        "\n'/ raw' = job texts/s / mean raw texts/s (wall clock, load-sensitive); "
        "'CPU eff' = raw CPU ms/text / job CPU ms/text (all processes of the job)"
    )
    print(
        f"{'arrow:bundle:batch:threads':<28} {'texts/s':>8} {'/ raw':>7} {'CPU ms/t':>9} {'CPU eff':>8}"
    )
    table = []
    for settings, row in zip(grid, jobs, strict=True):
        ratio = row.texts_per_s / raw_mean if row.texts_per_s and raw_mean else None
        cpu = row.extra.get("cpu_ms_per_text")
        eff = raw_cpu / cpu if raw_cpu and cpu else None
        table.append(
            {
                "settings": asdict(settings),
                "texts_per_s": row.texts_per_s,
                "ratio": ratio,
                "cpu_ms_per_text": cpu,
                "cpu_efficiency": eff,
            }
        )
        print(
            f"{settings.label:<28} {fmt(row.texts_per_s):>8} {fmt(ratio, 2):>7} "
            f"{fmt(cpu):>9} {fmt(eff, 2):>8}"
        )
    if args.json:
        _write_json(
            args.json,
            {
                "rows": [asdict(r) for r in step.rows],
                "raw_mean": raw_mean,
                "raw_cpu_ms_per_text": raw_cpu,
                "grid": table,
                "load_avg": os.getloadavg(),
            },
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embed",
        help="embedding backends selection matrix on AG News",
        description=(
            "Raw ONNX Runtime loop, the embed job (ORT and Triton backends), per-event "
            "latency at half the job's max rate, a naive PyFlink UDF and Beam RunInference, "
            "in one run. --tune runs a grid of job settings against the raw loop instead."
        ),
    )
    p.add_argument(
        "--limit", type=int, default=None, help="texts for the fast variants (default: all 3,800)"
    )
    p.add_argument("--slow-limit", type=int, default=600, help="texts for Beam RunInference")
    p.add_argument("--naive-limit", type=int, default=1200, help="texts for the naive UDF job")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument(
        "--threads", type=int, default=0, help="raw ORT intra-op threads (0 = all cores)"
    )
    p.add_argument(
        "--variants",
        nargs="+",
        choices=ALL_VARIANTS,
        default=list(ALL_VARIANTS),
        help="what to run (latency needs job: it paces at a fraction of the job's rate)",
    )
    p.add_argument(
        "--job",
        type=JobSettings.parse,
        default=JobSettings(),
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help=f"job settings (default {JobSettings().label})",
    )
    p.add_argument(
        "--extra-jobs",
        type=JobSettings.parse,
        nargs="*",
        default=[],
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help="further job rows with other settings, for comparison in the same run",
    )
    p.add_argument(
        "--no-two-run",
        dest="two_run",
        action="store_false",
        help="skip the two-run marginal cross-check of the job row (saves one job start)",
    )
    p.add_argument("--latency-fraction", type=float, default=0.5, help="of the job's max rate")
    p.add_argument(
        "--latency-rate",
        type=float,
        nargs="+",
        default=None,
        help="pace the latency runs at these events/s (one run each) instead of a fraction "
        "of the job's",
    )
    p.add_argument(
        "--latency-duration-s", type=float, default=40.0, help="measured paced seconds per run"
    )
    p.add_argument(
        "--latency-warmup-s",
        type=float,
        default=10.0,
        help="paced seconds before the measured ones, at the same rate (their p99 is "
        "reported apart)",
    )
    p.add_argument(
        "--latency-bundle-time-ms",
        type=int,
        default=50,
        help="python_bundle_time_ms of the latency runs",
    )
    p.add_argument(
        "--latency-flink-conf",
        nargs="*",
        default=list(LATENCY_FLINK_CONF),
        metavar="KEY=VALUE",
        help=f"extra Flink options for the latency runs (default: {' '.join(LATENCY_FLINK_CONF)})",
    )
    p.add_argument(
        "--latency-guarantees",
        nargs="+",
        choices=("at-least-once", "exactly-once"),
        default=["at-least-once", "exactly-once"],
    )
    p.add_argument("--tune", action="store_true", help="run the job settings grid instead")
    p.add_argument(
        "--grid",
        type=JobSettings.parse,
        nargs="+",
        metavar="ARROW:BUNDLE:BATCH:THREADS[:PAR]",
        help="settings for --tune (default: just --job)",
    )
    p.add_argument("--json", help="write results as JSON here")
    p.set_defaults(handler=_bench)
