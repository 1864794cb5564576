"""``flinkai bench suite``: every benchmark that has a ``suite_entry``, in one run.

Benchmarks join by exposing ``suite_entry`` (:class:`~flinkai_bench.shared.suite.SuiteEntry`)
in their module (see :data:`flinkai_bench.BENCHMARKS`); the memory planners are added
here. Modules without one are listed in the output as not in the suite yet.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from flinkai_bench.shared.suite import PROFILES, SuiteEntry, run_suite

__all__ = ["collect_entries", "register"]


def _planner_rows(_size: int | None) -> list[dict[str, Any]]:
    from flinkai.plan.cross_attention import plan_cross_attention
    from flinkai.plan.kvcache import (
        PRECISION_BITS,
        SMOLLM2_135M,
        kv_cache_bytes,
        kv_cache_bytes_gqa,
        l9_design,
    )

    rows: list[dict[str, Any]] = []
    shape = SMOLLM2_135M
    for i, run in enumerate(l9_design(), start=1):
        common = {
            "bits": PRECISION_BITS[run["precision"]],
            "tp": run["tp"],
            "compression": run["compression"],
        }
        formula = kv_cache_bytes(run["seq_len"], shape.hidden, shape.n_layers, **common)
        true = kv_cache_bytes_gqa(shape, run["seq_len"], **common)
        rows.append(
            {
                "name": f"KV L9 run {i}",
                **run,
                "formula_mb": formula / 2**20,
                "gqa_mb": true / 2**20,
            }
        )
    plan = plan_cross_attention(64, 512, tokens_per_frame=16, heads=8)
    rows.append(
        {
            "name": "cross-attention 64x16 frames, 512 text, 8 heads",
            "dense_mb": plan.dense_bytes / 2**20,
            "block_sparse_mb": plan.block_bytes / 2**20,
            "mask_nonzero": plan.masked_nonzero,
        }
    )
    return rows


PLANNERS = SuiteEntry(
    name="plan",
    description="Memory planners (closed forms): SmolLM2-135M KV cache over the L9 design, "
    "cross-attention dense vs windowed.",
    sizes={},
    run=_planner_rows,
    chart=("name", "gqa_mb"),
)


def collect_entries() -> tuple[list[SuiteEntry], list[str]]:
    """(entries, benchmark modules without a ``suite_entry``)."""
    from flinkai_bench import BENCHMARKS

    entries: list[SuiteEntry] = []
    missing: list[str] = []
    for name in BENCHMARKS:
        if name == __name__:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        entry = getattr(module, "suite_entry", None)
        if isinstance(entry, SuiteEntry):
            entries.append(entry)
        else:
            missing.append(name)
    entries.append(PLANNERS)
    return entries, missing


def _suite(args: argparse.Namespace) -> int:
    entries, missing = collect_entries()
    if args.only:
        unknown = set(args.only) - {e.name for e in entries}
        if unknown:
            print(f"suite: unknown entries {sorted(unknown)}; have {[e.name for e in entries]}")
            return 2
        entries = [e for e in entries if e.name in args.only]
    out = Path(args.out)
    print(f"profile {args.profile}: {', '.join(e.name for e in entries)}", flush=True)
    if missing:
        print(f"not in the suite yet (no suite_entry): {', '.join(missing)}", flush=True)
    if not args.no_build:
        from flinkai_bench.prepare import prepare

        prepare([e.name for e in entries], progress=lambda line: print(line, flush=True))
    results = run_suite(entries, args.profile, out, charts=not args.no_charts)
    for r in results:
        print(f"  {r.name}: {'failed: ' + r.error if r.error else f'{len(r.rows)} rows'}")
    print(f"wrote {out / 'results.json'}, {out / 'matrix.md'}")
    return 1 if any(r.error for r in results) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "suite",
        help="run every benchmark with a suite entry; results.json, matrix.md, charts",
        description=__doc__,
    )
    p.add_argument("--profile", choices=PROFILES, default="default")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the results")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these entries")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument(
        "--no-build",
        action="store_true",
        help="do not build missing artefacts first (int8 model, anomaly models); "
        "rows that need them say why in their note",
    )
    p.set_defaults(handler=_suite)
