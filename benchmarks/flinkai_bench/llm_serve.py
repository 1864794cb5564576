"""``flinkai bench llm-serve``: LLM completion under load, per row against the scheduler.

Prompts are AG News texts behind one instruction, cut to varied lengths; arrivals are
Poisson. Three rows run the same prompt pool:

* **per-row**: today's path before the scheduler, the ``llm_complete`` SQL function's
  code (:class:`~flinkai.functions.llm.LlmCompleteFunction`) decoding one prompt at a
  time, fed by one worker thread;
* **raw**: the scheduler in a plain process (:class:`~flinkai.functions.llm_service.
  CompletionService`), no Flink;
* **job**: ``jobs/llm_complete.sql`` on the local MiniCluster with the real broker,
  token deltas on a topic (their producer timestamps give TTFT and ITL).

Each row is swept over arrival rates around its own saturation throughput (a
closed burst measured first), on up until a rate fails, then once more halfway between
the highest rate that kept up and the lowest above it that failed (``--refine``). A
rate *keeps up* when the queue does not grow over the ``--seconds`` run: a line fitted
to the requests in the system, counted each second over the window's last three
quarters, rises by at most 3 plus 5% of the arrivals in that span
(:func:`~flinkai_bench.llm_serve_rows.judge`); the **max rate** is the highest that
keeps up.

Then **bursts** of 64, 256 and 1,024 prompts go to the job at once, with its default
checkpoint settings: drain time, tokens/s, the longest checkpoint during the burst
(Flink's REST API), restarts and identity. The **memory** workload runs multi-turn
sessions through the raw service twice: every session's KV resident (no budget), and a
KV budget with offload to the Kafka snapshot store; once with a think time between a
turn's answer and the session's next turn (the summary's ``offload_*``), once with every
turn queued at once (``offload_closed_*``).

Identity: every completion's tokens are compared with single-sequence greedy (per-row
outputs, or :func:`~flinkai.llm.compare.greedy_with_margins`); a difference is
reported with its logit margin, and counts as identical only below 1e-4.

The JSON's ``summary`` holds the keys issue #37 and #43 name.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flinkai_bench.llm_serve_rows import (
    BURSTS,
    DESIGN_ITL_SLO_MS,
    DESIGN_TOK_S,
    Item,
    RateRun,
    Record,
    Row,
)

__all__ = ["register", "summarize"]

# -- the bench ----------------------------------------------------------------------


def _sweep(row: Row, pool: Sequence[Item], seconds: float, fractions: Sequence[float],
           capacity: float, seed: int, log: Callable[[str], None],
           refine: int = 1) -> list[RateRun]:  # fmt: skip
    runs: list[RateRun] = []

    def at(rate: float) -> None:
        run = row.run(pool, rate, seconds, seed + len(runs))
        log(f"  {row.name} at {rate:.2f}/s: {run.tok_s:.1f} tok/s, keeps up {run.keeps_up}, "
            f"backlog {run.backlog_at_end}")  # fmt: skip
        runs.append(run)

    rates = [max(0.05, f * capacity) for f in fractions]
    k = 0
    while k < len(rates):
        at(rates[k])
        # The max rate is known only once a rate fails: go on up until one does.
        if k == len(rates) - 1 and runs[-1].keeps_up and len(rates) < len(fractions) + 3:
            rates.append(rates[-1] * 1.25)
        k += 1
    # The grid's steps are a quarter or more of the capacity: halve the gap between the
    # highest rate that kept up and the lowest one above it that did not.
    for _ in range(refine):
        best = _best(runs)
        if best is None:
            break
        above = [r.rate for r in runs if not r.keeps_up and r.rate > best.rate]
        if not above:
            break
        at((best.rate + min(above)) / 2)
    return runs


def _capacity(row: Row, pool: Sequence[Item], n: int) -> float:
    """Prompts/s of a closed burst of ``n`` (everything submitted at once)."""
    start = time.monotonic()
    records = {}
    row.begin()
    for i in range(n):
        item = pool[i % len(pool)]
        key = f"{item.key}-cap{uuid.uuid4().hex[:6]}-{i}"
        records[key] = Record(key, time.monotonic())
        row.submit(key, item, records[key])
    row.drain(records, timeout_s=600)
    return n / (time.monotonic() - start)


def _best(runs: Sequence[RateRun]) -> RateRun | None:
    ok = [r for r in runs if r.keeps_up]
    return max(ok, key=lambda r: r.rate) if ok else None


def single_step_ms(model: Any, past: int, repeats: int = 10) -> float:
    """One single-sequence decode step after ``past`` tokens (median of ``repeats``)."""
    ids = [int(i) for i in np.random.default_rng(0).integers(100, 1000, past)]
    _, cache = model.decoder.forward(ids)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.decoder.forward([5], cache)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _handle(args: argparse.Namespace) -> int:
    from flinkai.config import load_config
    from flinkai.functions.llm import load_prompt_model
    from flinkai_bench.llm_serve_job import JobRow, bursts, memory_workload
    from flinkai_bench.llm_serve_rows import PerRow, Raw, make_pool
    from flinkai_bench.shared.broker import broker
    from flinkai_bench.shared.rss import RssSampler

    def log(line: str) -> None:
        print(line, flush=True)

    config = load_config().with_overrides(
        llm={"max_new_tokens": args.new_tokens, "store": "memory"}
    )
    model = load_prompt_model(config)
    pool = make_pool(model, args.pool, args.seed)
    lengths = sorted(len(i.ids) for i in pool)
    median_past = lengths[len(lengths) // 2] + args.new_tokens // 2
    step_ms = single_step_ms(model, median_past)
    log(f"pool: {len(pool)} prompts, {lengths[0]}..{lengths[-1]} tokens (median {lengths[len(lengths) // 2]}); "
        f"single step at past {median_past}: {step_ms:.1f} ms")  # fmt: skip
    fractions = [float(f) for f in args.fractions.split(",")]
    result: dict[str, Any] = {
        "config": {"new_tokens": args.new_tokens, "pool": args.pool, "seconds": args.seconds,
                   "fractions": fractions, "refine": args.refine, "seed": args.seed, "llm": {
                       k: getattr(config.llm, k) for k in
                       ("max_running", "step_tokens", "overlap_prefill", "prefill_first_at",
                        "kv_budget_bytes", "store_thread", "poll_ms", "store")}},
        "single_step_ms": round(step_ms, 2),
        "median_past": median_past,
        "rows": {},
    }  # fmt: skip
    with RssSampler() as rss:
        rows_runs: dict[str, list[RateRun]] = {}
        for name in args.rows.split(","):
            if name not in ("per-row", "raw"):
                continue
            row: Any = PerRow(config, model) if name == "per-row" else Raw(config, model)
            cap = _capacity(row, pool, args.capacity_burst if name == "raw" else 12)
            log(f"{name}: closed-burst capacity {cap:.2f} prompts/s")
            rows_runs[name] = _sweep(
                row, pool, args.seconds, fractions, cap, args.seed, log, args.refine
            )
            row.close()
        result["peak_rss_mb_in_process"] = round(rss.peak_bytes / 2**20, 1)
    with broker(args.bootstrap) as bootstrap:
        if "job" in args.rows.split(","):
            job = JobRow(bootstrap, config, args)
            try:
                cap = _capacity(job, pool, args.capacity_burst)
                log(f"job: closed-burst capacity {cap:.2f} prompts/s")
                rows_runs["job"] = _sweep(
                    job, pool, args.seconds, fractions, cap, args.seed, log, args.refine
                )
                best = _best(rows_runs["job"])
                if best is not None:
                    half = job.run(pool, best.rate / 2, args.seconds, args.seed + 99)
                    log(f"  job at half max rate {best.rate / 2:.2f}/s: ITL p99 "
                        f"{half.summary()['itl_ms']['p99']} ms")  # fmt: skip
                    result["job_half_rate"] = half.summary()
                if not args.no_bursts:
                    sizes = [int(b) for b in args.bursts.split(",")]
                    result["bursts"] = bursts(job, model, pool, sizes, log)
                result["job_identity"] = job.identity(model, pool, log)
                result["peak_rss_mb_job"] = job.peak_rss_mb
            finally:
                job.close()
        if not args.no_memory:
            result["memory"] = memory_workload(bootstrap, config, model, pool, args, log)
    for name, runs in rows_runs.items():
        result["rows"][name] = [r.summary() for r in runs]
    result["summary"] = summarize(result, rows_runs, step_ms)
    log(json.dumps(result["summary"], indent=2))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {path}")
    return 0


def summarize(
    result: dict[str, Any], rows: dict[str, list[RateRun]], step_ms: float
) -> dict[str, Any]:
    """The keys issues #37 and #43 ask for; None where a leg did not run or never kept up."""

    def best_tok(name: str) -> float | None:
        b = _best(rows.get(name, []))
        return round(b.tok_s, 1) if b is not None else None

    half = result.get("job_half_rate") or {}
    slo_ok = [r for r in rows.get("job", [])
              if r.keeps_up and (r.summary()["itl_ms"]["p99"] or 1e9) <= DESIGN_ITL_SLO_MS]  # fmt: skip
    bursts_ = result.get("bursts") or []
    memory = result.get("memory") or {}
    out = {
        "per_row_tok_s": best_tok("per-row"),
        "raw_tok_s": best_tok("raw"),
        "job_tok_s": best_tok("job"),
        "job_itl_p99_ms_at_half": (half.get("itl_ms") or {}).get("p99"),
        # Time to the first token delta as a reader of the deltas topic received it.
        "job_first_delta_p50_ms_at_half": (half.get("ttft_at_consumer_ms") or {}).get("p50"),
        "job_first_delta_p99_ms_at_half": (half.get("ttft_at_consumer_ms") or {}).get("p99"),
        "job_tok_s_at_itl_slo": round(max(r.tok_s for r in slo_ok), 1) if slo_ok else None,
        "single_step_ms": round(step_ms, 2),
        "identical": (result.get("job_identity") or {}).get("identical"),
        "offload_peak_kv_ratio": memory.get("kv_ratio"),
        "offload_tok_s_ratio": memory.get("tok_s_ratio"),
        "offload_peak_rss_ratio": memory.get("rss_ratio"),
        "offload_think_s": memory.get("think_s"),
        "offload_closed_peak_kv_ratio": (memory.get("closed") or {}).get("kv_ratio"),
        "offload_closed_tok_s_ratio": (memory.get("closed") or {}).get("tok_s_ratio"),
        "burst_restarts": max((b["restarts"] for b in bursts_), default=None),
        "burst_checkpoint_max_ms": max(
            (b["checkpoint_max_ms"] for b in bursts_ if b["checkpoint_max_ms"] is not None),
            default=None,
        ),
        "burst_identical": all(b["identical"] for b in bursts_) if bursts_ else None,
        "burst_1024_drain_s": next((b["drain_s"] for b in bursts_ if b["prompts"] == 1024), None),
        "burst_1024_tok_s": next((b["tok_s"] for b in bursts_ if b["prompts"] == 1024), None),
    }
    p, j, r = out["per_row_tok_s"], out["job_tok_s"], out["raw_tok_s"]
    out["job_over_per_row"] = round(j / p, 2) if p and j else None
    out["job_over_raw"] = round(j / r, 2) if r and j else None
    itl = out["job_itl_p99_ms_at_half"]
    out["itl_half_over_step"] = round(itl / step_ms, 2) if itl else None
    b = out["burst_1024_tok_s"]
    out["burst_1024_over_job_max"] = round(b / j, 2) if b and j else None
    out["design_tok_s"] = DESIGN_TOK_S
    out["design_itl_p99_ms"] = DESIGN_ITL_SLO_MS
    return out


def register(subparsers: Any) -> None:
    """Add ``flinkai bench llm-serve``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "llm-serve",
        help="LLM completion under Poisson load and bursts: per-row vs the scheduler vs the job",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--rows", default="per-row,raw,job", help="rows to run (per-row,raw,job)")
    parser.add_argument("--seconds", type=float, default=60.0, help="arrival window per rate (60)")
    parser.add_argument("--fractions", default="0.5,0.75,0.9,1.1",
                        help="rates as fractions of each row's closed-burst capacity")  # fmt: skip
    parser.add_argument("--refine", type=int, default=1,
                        help="runs halving the gap between the max rate and the first that "
                        "failed (1)")  # fmt: skip
    parser.add_argument("--new-tokens", type=int, default=64, help="max new tokens (64)")
    parser.add_argument("--pool", type=int, default=160, help="distinct prompts (160)")
    parser.add_argument("--capacity-burst", type=int, default=64, help="closed burst size (64)")
    parser.add_argument("--sessions", type=int, default=24, help="memory workload sessions (24)")
    parser.add_argument("--turns", type=int, default=4, help="turns per session (4)")
    parser.add_argument("--budget-fraction", type=float, default=0.69,
                        help="memory workload's KV budget, as a fraction of the all-resident "
                        "peak (0.69: the design's -31%%)")  # fmt: skip
    parser.add_argument("--think-s", type=float, default=5.0,
                        help="memory workload: seconds between a turn's answer and the "
                        "session's next turn (5)")  # fmt: skip
    parser.add_argument("--small-cache-mb", type=float, default=64.0,
                        help="memory workload: one more offload run with the store's decoded "
                        "cache cut to this many MiB, so offloaded KV leaves the process "
                        "(64; 0: skip)")  # fmt: skip
    parser.add_argument("--bursts", default=",".join(str(b) for b in BURSTS),
                        help="burst sizes sent at once to the job (64,256,1024)")  # fmt: skip
    parser.add_argument("--no-bursts", action="store_true", help="skip the burst rows")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory workload")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (default: a local broker)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.set_defaults(handler=_handle)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
