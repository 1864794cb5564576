"""The scaling run as JSON and as a picture: backlog, TaskManagers, throughput, signal."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flinkai_bench.autoscaling.timeline import Sample, TimelineFigures, rate_series
from flinkai_bench.scaling.harness import ScalingRun

__all__ = ["backlog_signals", "draw_timeline", "payload", "summary", "write_json"]

#: Trailing window of the throughput curve; offsets move on 5 s checkpoints.
RATE_WINDOW_S = 10.0


def backlog_signals(samples: Sequence[Sample], batch: int) -> dict[str, Any]:
    """Flink's ``pendingRecords``, the source lag and the consumer-group lag, tick by tick.

    ``pendingRecords`` is the source consumer's own lag from its fetch position: records
    prefetched into the source are not in it. The source lag (what the chart's backlog
    rule reads) is the log end offsets minus the source's position: the prefetch is in
    it, work already emitted downstream is not. The group lag is what KEDA's Kafka
    scaler reads: end offsets (every record the harness wrote, all acknowledged) minus
    the offsets the source committed on its last checkpoint, so it also counts up to a
    checkpoint interval of work already done.
    """
    pairs = [
        (s.pending, float(s.produced - s.committed))
        for s in samples
        if s.running and s.pending is not None and s.committed is not None
    ]
    if not pairs:
        return {"ticks": 0}
    hidden = [lag - pending for pending, lag in pairs]
    out: dict[str, Any] = {
        "ticks": len(pairs),
        "pending_peak": max(p for p, _ in pairs),
        "group_lag_peak": max(lag for _, lag in pairs),
        "pending_mean": sum(p for p, _ in pairs) / len(pairs),
        "group_lag_mean": sum(lag for _, lag in pairs) / len(pairs),
        # Ticks where pendingRecords read under one batch while a batch or more of
        # input was not yet committed: work the REST signal did not see.
        "ticks_pending_under_batch_lag_over_batch": sum(
            1 for p, lag in pairs if p < batch and lag >= batch
        ),
        "hidden_mean": sum(hidden) / len(hidden),
        "hidden_max": max(hidden),
    }
    triples = [
        (s.pending, s.source_lag)
        for s in samples
        if s.running and s.pending is not None and s.source_lag is not None
    ]
    if triples:
        prefetch = [lag - p for p, lag in triples]
        out.update(
            source_lag_ticks=len(triples),
            source_lag_peak=max(lag for _, lag in triples),
            source_lag_mean=sum(lag for _, lag in triples) / len(triples),
            pending_mean_same_ticks=sum(p for p, _ in triples) / len(triples),
            # The prefetch: in the source lag, not in pendingRecords.
            prefetch_mean=sum(prefetch) / len(prefetch),
            prefetch_max=max(prefetch),
            # Ticks where pendingRecords read under one batch while the source had a
            # batch or more not yet emitted: input the old signal did not see.
            ticks_pending_under_batch_source_lag_over_batch=sum(
                1 for p, lag in triples if p < batch and lag >= batch
            ),
            # And the converse: the source lag reading idle while pendingRecords did not.
            ticks_source_lag_under_batch_pending_over_batch=sum(
                1 for p, lag in triples if lag < batch and p >= batch
            ),
        )
    return out


def summary(run: ScalingRun, figures: TimelineFigures) -> dict[str, Any]:
    """The run in the terms of the chart: its metrics, what decided, rescales, delivery."""
    return {
        "chart_metrics": run.chart_metrics,
        "metrics_used": [m for m in run.chart_metrics if m in run.metrics_seen],
        "rescales": max(0, len(figures.parallelism_seen) - 1),
        "replica_changes": [[e.before, e.after] for e in run.events],
        "parallelism_seen": figures.parallelism_seen,
        "scale_downs_held_for_a_missing_metric": sum(
            1 for d in run.decisions if d.reason.startswith("scale-down held")
        ),
        "exactly_once": run.exactly_once_ok,
        "lost": run.lost,
        "duplicated": run.duplicated,
        "dead_letters": run.dead_letters,
        "values": run.settings.get("values", {}),
        "shortcuts": run.settings.get("shortcuts", []),
        # What the backlog rule read: the source lag where the broker's exporter was
        # scraped, else its pendingRecords fallback.
        "backlog_signal": "source lag" if run.broker_metrics else "pendingRecords (fallback)",
        "backlog_signals": backlog_signals(run.samples, run.batch_size),
        "missing_metric_case": {
            **run.settings.get("missing_metric_case", {}),
            # The HPA with the GPU metric, deciding on the same reads: each tick where the
            # others asked for fewer replicas is a scale-down it held.
            "scale_downs_held": sum(
                1 for d in run.shadow_decisions if d.reason.startswith("scale-down held")
            ),
            "scale_downs": sum(1 for d in run.shadow_decisions if d.desired < d.current),
            "ticks": len(run.shadow_decisions),
        },
    }


def payload(run: ScalingRun, figures: TimelineFigures, machine: dict[str, Any]) -> dict[str, Any]:
    """Everything the run measured, JSON-ready (the timeline included, for re-plotting)."""
    return {
        "benchmark": "scaling",
        "summary": summary(run, figures),
        "machine": machine,
        "settings": run.settings,
        "target_batches_per_replica": run.target,
        "batch_size": run.batch_size,
        "stop_mode": run.stop_mode,
        "figures": asdict(figures),
        "exactly_once": {
            "ok": run.exactly_once_ok,
            "report": run.exactly_once,
            "sent": len(run.expected_ids),
            "read": len(run.output_ids),
            "dead_letters": run.dead_letters,
        },
        "events": [asdict(e) | {"kind": e.kind} for e in run.events],
        "samples": [asdict(s) for s in run.samples],
        "load_rates": [{"t": t, "drain_rate": r} for t, r in run.load_rates],
        "decisions": [asdict(d) for d in run.decisions],
        "offset_read_errors": run.offset_read_errors,
        "metric_read_errors": run.metric_read_errors,
        "check_s": run.check_s,
        "replaced_taskmanagers": run.replaced,
        "error": run.error,
    }


def write_json(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def draw_timeline(run: ScalingRun, path: Path) -> Path:
    """Four stacked panels over time, scale decisions as vertical lines."""
    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font search at -v
    matplotlib.use("Agg")  # files only; no display on a server
    import matplotlib.pyplot as plt

    s = run.samples
    t = [x.t for x in s]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    backlog, tms, rate, signal = axes
    backlog.plot(
        t,
        [x.pending if x.pending is not None else float("nan") for x in s],
        "-",
        label="pendingRecords (REST)",
    )
    backlog.plot(
        t,
        [x.produced - x.committed if x.committed is not None else float("nan") for x in s],
        "--",
        label="consumer-group lag (end - committed)",
    )
    backlog.legend(loc="upper left", fontsize=8)
    backlog.set_ylabel("input records\nwaiting")
    tms.step(t, [x.replicas for x in s], where="post", label="replicas (HPA)")
    tms.step(t, [x.registered for x in s], where="post", label="registered")
    tms.step(
        t,
        [x.parallelism if x.running and x.parallelism else 0 for x in s],
        where="post",
        label="parallelism RUNNING (REST)",
    )
    tms.set_ylabel("TaskManagers")
    tms.legend(loc="upper left", fontsize=8)
    series = rate_series(s, RATE_WINDOW_S)
    rate.plot([p[0] for p in series], [p[1] for p in series], "-", label="committed")
    followed = [(t, r) for t, r in run.load_rates if r is not None]
    if followed:
        rate.plot(
            [p[0] for p in followed],
            [p[1] for p in followed],
            "--",
            label="drain rate the load follows",
        )
    rate.legend(loc="upper left", fontsize=8)
    rate.set_ylabel(f"committed input\nrecords/s ({RATE_WINDOW_S:.0f} s)")
    signal.plot(
        t,
        [x.signal / x.replicas if x.signal is not None else float("nan") for x in s],
        "-",
        label="backlog batches per replica",
    )
    signal.axhline(run.target, color="red", linestyle="--", label=f"target {run.target:g}")
    signal.set_ylabel("HPA signal")
    signal.set_yscale("symlog", linthresh=run.target)
    signal.legend(loc="upper right", fontsize=8)
    signal.set_xlabel("seconds")
    for ax in axes:
        for e in run.events:
            ax.axvline(e.t, color="green" if e.kind == "up" else "orange", alpha=0.6)
        if run.load_stopped_t is not None:
            ax.axvline(run.load_stopped_t, color="grey", linestyle=":")
    fig.suptitle(
        "embed job, reactive mode: HPA-decided TaskManagers "
        "(green: scale-up, orange: scale-down, dotted: load stopped)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
