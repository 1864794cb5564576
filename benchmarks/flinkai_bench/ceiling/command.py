"""``flinkai bench ceiling``: rows, the stage profile, the table and the JSON."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flinkai.paths import bundled_udf_dir
from flinkai_bench.embed.command import _Steps
from flinkai_bench.embed.results import VariantResult, fmt, print_table
from flinkai_bench.embed.variants import repo
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry, machine_info

__all__ = ["ROWS", "CeilingPlan", "register", "run_ceiling", "suite_entry"]

#: What the bench can run, in order. ``raw`` is the baseline of every ratio.
ROWS = ("raw", "json", "f32", "f32_bundle", "constant", "two_slots", "triton", "latency")

#: Rows per Python bundle (and Arrow batch) of the ``f32_bundle`` row: fewer, larger
#: bundles (the default is 1,024) for a model that is not the bottleneck.
BIG_BUNDLE = 4096


@dataclass(frozen=True)
class CeilingPlan:
    """How much to run.

    Attributes:
        events: Events per job row (AG News texts, cycled; the same for every row).
        profile_s: Seconds of py-spy and JFR sampling in the ``f32`` and ``json`` rows
            (0: no profile). Sampling starts at the job's first result.
        rows: Which of :data:`ROWS` to run.
        latency_s: Measured seconds of the paced latency row, at half the best
            one-slot rate.
    """

    events: int = 100_000
    profile_s: float = 20.0
    rows: tuple[str, ...] = ROWS
    latency_s: float = 20.0


def _null_model() -> dict[str, dict[str, Any]]:
    """Build the null model next to the exported one; the config overrides that load it."""
    from flinkai.config import load_config
    from flinkai.models.artifacts import load_artifacts
    from flinkai.paths import models_dir
    from flinkai_bench.research.null_model import NULL_MODEL_NAME, build_null_model

    source = load_artifacts(load_config().model)
    dest = models_dir() / NULL_MODEL_NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    null = build_null_model(source, dest)
    return {"model": {"name": NULL_MODEL_NAME, "dir": str(dest), "dim": null.dim}}


def _with(base: dict[str, dict[str, Any]], **sections: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) for k, v in base.items()}
    for section, values in sections.items():
        out.setdefault(section, {}).update(values)
    return out


def run_ceiling(plan: CeilingPlan) -> dict[str, Any]:
    """Run the rows of ``plan``; returns the JSON payload (rows, ratios, settings)."""
    steps = _Steps()
    null = _null_model()
    f32 = _with(null, embedding={"vector_encoding": "f32"})
    udfs = [str(bundled_udf_dir()), str(repo() / "benchmarks" / "baseline_udfs")]
    common = {"events": plan.events}
    rows: dict[str, VariantResult] = {}
    if "raw" in plan.rows:
        rows["raw"] = steps(
            "raw_ort",
            None,
            name=(
                "raw loop: tokenise + null ORT, batch 32, sorted within 1,024-text windows "
                "(no Flink, no Kafka)"
            ),
            batch_size=32,
            sort_window=1024,
            overrides=null,
            **common,
        )
    job = {"profile_s": plan.profile_s, **common}
    if "json" in plan.rows:
        rows["json"] = steps(
            "job", None, name="job, 1 slot, null ORT, JSON array", overrides=null, **job
        )
    if "f32" in plan.rows:
        rows["f32"] = steps(
            "job", None, name="job, 1 slot, null ORT, f32 bytes", overrides=f32, **job
        )
    if "f32_bundle" in plan.rows:
        rows["f32_bundle"] = steps(
            "job",
            None,
            name=f"job, 1 slot, null ORT, f32 bytes, bundle {BIG_BUNDLE}",
            overrides=_with(
                f32, runtime={"python_bundle_size": BIG_BUNDLE, "arrow_batch_size": BIG_BUNDLE}
            ),
            **common,
        )
    if "constant" in plan.rows:
        rows["constant"] = steps(
            "job",
            None,
            name="job, 1 slot, constant UDF (no tokenise, no model), f32 bytes",
            overrides=f32,
            variables={"EMBED_FUNCTION": "constant.text_to_vector_constant_f32"},
            udf_dirs=udfs,
            **common,
        )
    if "two_slots" in plan.rows:
        rows["two_slots"] = steps(
            "job",
            None,
            name="job, 2 slots, null ORT, f32 bytes",
            overrides=_with(f32, runtime={"parallelism": 2}),
            **common,
        )
    if "triton" in plan.rows:
        rows["triton"] = steps(
            "job",
            None,
            name="job, 1 slot, null model on local Triton (gRPC), f32 bytes",
            overrides=f32,
            backend="triton",
            **common,
        )
    # Every row's rate is the middle of its run (10th to 90th percentile of its output
    # times), as the latency row's pace is half of one: the fastest rows write without
    # a pause, which leaves the usual "after the first flush" rate undefined.
    for r in rows.values():
        middle = r.extra.get("rate_p10_p90")
        if middle:
            r.extra["rate_after_first_flush"] = r.texts_per_s
            r.texts_per_s = middle
            r.note = f"10th-90th percentile of output times; {r.note}"
    if "latency" in plan.rows:
        # Half the rate of the default-bundle f32 row: the settings a user runs.
        base = rows.get("f32")
        if base is None or not base.texts_per_s:
            rows["latency"] = steps.na("latency at 50% of the ceiling", "no f32 job rate")
        else:
            rate = base.texts_per_s / 2
            rows["latency"] = steps(
                "latency",
                None,
                name=f"latency at 50% of the ceiling ({rate:.0f}/s, f32, exactly-once)",
                overrides=f32,
                guarantee="exactly-once",
                rate=rate,
                duration_s=plan.latency_s,
                warmup_s=5.0,
                max_rate_from=base.name,
            )
    raw = rows.get("raw")
    ratios = {
        key: r.texts_per_s / raw.texts_per_s
        for key, r in rows.items()
        if key not in ("raw", "latency") and r.texts_per_s and raw and raw.texts_per_s
    }
    return {
        "bench": "ceiling",
        "plan": asdict(plan),
        "machine": machine_info(),
        "rows": {k: asdict(r) for k, r in rows.items()},
        "ratio_to_raw": ratios,
    }


def _print(payload: dict[str, Any]) -> None:
    rows = [VariantResult(**r) for r in payload["rows"].values()]
    print()
    print_table(rows)
    print("\nCPU ms per event by process (10th-90th percentile of the output):")
    for r in rows:
        by = r.extra.get("cpu_ms_per_event_p10_p90_by_process")
        if by:
            parts = ", ".join(f"{k} {v:.3f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
            print(f"  {r.name}: {parts}")
    for r in rows:
        prof = r.extra.get("stage_profile")
        if not prof:
            continue
        print(f"\nstage profile, {r.name} ({prof['duration_s']:.0f} s of samples):")
        for side in ("python", "jvm"):
            shares = ", ".join(f"{k} {v:.0%}" for k, v in prof[side].items())
            print(f"  {side} ({prof[f'{side}_samples']} samples): {shares or '-'}")
        for err in prof["errors"]:
            print(f"  profile: {err}")
    for key, ratio in payload["ratio_to_raw"].items():
        print(f"{key} / raw loop: {fmt(ratio, 2)}")


def _run(args: argparse.Namespace) -> int:
    plan = CeilingPlan(
        events=args.events,
        profile_s=args.profile_s,
        rows=tuple(args.rows),
        latency_s=args.latency_s,
    )
    t0 = time.monotonic()
    payload = run_ceiling(plan)
    payload["wall_s"] = time.monotonic() - t0
    _print(payload)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
        print(f"\nwrote {args.json}")
    failed = [r["name"] for r in payload["rows"].values() if r["note"].startswith("failed")]
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ceiling",
        help="the framework's own rate with a null model: events/s, CPU by process, stage profile",
        description=(
            "Runs the embed job with a zero-cost ONNX model (real backend, tokeniser and "
            "artifact folder) to measure the data path alone: 1 and 2 slots, JSON and f32 "
            "vector encoding, a constant UDF without tokenising, the Triton path, and "
            "latency at half the ceiling; py-spy and JFR give the stage profile."
        ),
    )
    p.add_argument("--events", type=int, default=CeilingPlan.events, help="events per job row")
    p.add_argument(
        "--profile-s", type=float, default=CeilingPlan.profile_s, help="0 turns profiling off"
    )
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--latency-s", type=float, default=CeilingPlan.latency_s)
    p.add_argument("--json", help="write the results here")
    p.set_defaults(handler=_run)


def _suite_run(size: int | None) -> EntryOutput:
    events = size or CeilingPlan.events
    # The suite leaves out the 2-slot and Triton rows (minutes each); `bench ceiling` has them.
    rows = ("raw", "json", "f32", "f32_bundle", "constant", "latency")
    payload = run_ceiling(CeilingPlan(events=events, profile_s=0.0, rows=rows))
    table = [
        {
            "row": r["name"],
            "events_per_s": r["texts_per_s"],
            "cpu_ms_per_event": r["extra"].get("cpu_ms_per_text"),
            "p50_ms": r["p50_ms"],
            "p99_ms": r["p99_ms"],
            "note": r["note"],
        }
        for r in payload["rows"].values()
    ]
    ratios = ", ".join(f"{k}/raw {v:.2f}" for k, v in payload["ratio_to_raw"].items())
    return EntryOutput(
        {"ceiling (null model)": table},
        notes=[f"{events} AG News events per row, null ORT model; {ratios}"],
    )


suite_entry = SuiteEntry(
    name="ceiling",
    description="The data path without the model: null-model embed job, events/s per slot.",
    sizes={"quick": 20_000, "default": 60_000, "full": 200_000},
    run=_suite_run,
    chart=("row", "events_per_s"),
)
