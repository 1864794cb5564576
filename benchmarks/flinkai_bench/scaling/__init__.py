"""``flinkai bench scaling``: reactive rescaling of the embed job under load.

The harness (:mod:`.harness`) runs ``jobs/embed_clicks.sql`` in application mode with
the reactive scheduler, keeps a backlog in its 3-partition input (``--lead-s`` seconds
of the job's measured drain rate, :mod:`.load`), and adds and removes
TaskManagers as the Kubernetes HPA controller would: every metric the chart renders with
the stated values, read from a real Prometheus through the chart's adapter queries,
the controller's arithmetic with the chart's windows and policies times a named time
scale. It reports the time
from the signal crossing its target to the new TaskManager running tasks, the time
until the backlog is back under target, the committed-input rate before and after,
the scale-down, the parallelism from the REST API, and the exact exactly-once check.
:mod:`.report` writes the JSON and the picture (backlog, TaskManagers, throughput and
signal over time).
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from flinkai_bench.autoscaling.timeline import TimelineFigures, reduce_timeline
from flinkai_bench.scaling.harness import ScalingOptions, ScalingRun, run_scaling
from flinkai_bench.scaling.load import LoadPlan
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = ["figures_of", "format_table", "register", "run_bench", "suite_entry"]


def figures_of(run: ScalingRun) -> TimelineFigures:
    """The run's figures (one slot per TaskManager, as the chart runs it)."""
    return reduce_timeline(
        run.samples, run.events, target=run.target, load_stopped_t=run.load_stopped_t
    )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_table(run: ScalingRun, figures: TimelineFigures) -> str:
    lines = [
        "change  p before -> after  crossed  decided  running  cross->running  decide->running"
    ]
    for f in figures.scale_events:
        lines.append(
            f"{f.kind:<6}  {f.before}->{f.after} TMs  p {f.parallelism_before}->"
            f"{f.parallelism_after}  {f.crossed_t:6.1f}  {f.decided_t:6.1f}  "
            f"{_s(f.running_t):>7}  {_s(f.cross_to_running_s):>14}  "
            f"{_s(f.decide_to_running_s):>15}"
        )
    lines += [
        f"parallelism seen (REST, RUNNING): {' -> '.join(map(str, figures.parallelism_seen))}",
        f"backlog under target for good: {_s(figures.cross_to_under_s)} s after the first "
        f"crossing, {_s(figures.stop_to_under_s)} s after the load stopped",
        f"committed input records/s: before {_s(figures.rate_before)}, "
        f"after {_s(figures.rate_after)}",
        f"exactly-once: {run.exactly_once}; dead letters {run.dead_letters}",
        f"TaskManagers removed by {run.stop_mode}",
    ]
    return "\n".join(lines)


def run_bench(
    options: ScalingOptions,
    bootstrap: str | None = None,
    json_path: Path | None = None,
    png_path: Path | None = None,
    progress: Any = print,
    broker_metrics: str | None = None,
) -> tuple[ScalingRun, TimelineFigures]:
    """Run, reduce, and write the JSON and PNG when paths are given."""
    from flinkai.testing import session_broker
    from flinkai_bench.scaling.report import draw_timeline, payload, write_json
    from flinkai_bench.shared.suite import machine_info

    if bootstrap:
        run = run_scaling(bootstrap, options, progress=progress, broker_metrics=broker_metrics)
    else:
        with session_broker() as local:
            run = run_scaling(
                local.bootstrap, options, progress=progress, broker_metrics=local.metrics_address
            )
    figures = figures_of(run)
    if json_path is not None:
        write_json(payload(run, figures, machine_info()), json_path)
    if png_path is not None:
        draw_timeline(run, png_path)
    return run, figures


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: the cluster and broker stop


def _handle(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    options = ScalingOptions(
        partitions=args.partitions,
        load=LoadPlan(seed=args.seed, lead_s=args.lead_s, max_records=args.max_records),
        hold_s=args.hold_s,
        time_scale=args.time_scale,
        resource_stabilization=args.stabilization,
        null_model=not args.real_model,
    )
    run, figures = run_bench(
        options,
        args.bootstrap,
        Path(args.json) if args.json else None,
        Path(args.png) if args.png else None,
        broker_metrics=args.broker_metrics,
        progress=(lambda line: print(line, flush=True)) if args.verbose else (lambda line: None),
    )
    print(format_table(run, figures))
    from flinkai_bench.scaling.report import summary

    for key, value in summary(run, figures).items():
        print(f"{key}: {value}")  # the values and shortcuts it ran with, and what it measured
    if run.error:
        print(f"error: {run.error}")
    return 0 if run.exactly_once_ok and not run.error else 1


def register(subparsers: Any) -> None:
    """Add ``flinkai bench scaling``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "scaling",
        help="reactive rescaling under load: HPA-decided TaskManagers, timings, exactly-once",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = ScalingOptions()
    p.add_argument("--partitions", type=int, default=defaults.partitions)
    p.add_argument(
        "--lead-s",
        type=float,
        default=defaults.load.lead_s,
        help="input kept waiting, in seconds of the job's measured drain rate",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=defaults.load.seed,
        help="records sent first, and the least kept waiting",
    )
    p.add_argument(
        "--max-records", type=int, default=defaults.load.max_records, help="bound on all input"
    )
    p.add_argument("--hold-s", type=float, default=defaults.hold_s)
    p.add_argument(
        "--time-scale",
        type=float,
        default=defaults.time_scale,
        help="every chart window and policy period times this (a named shortcut)",
    )
    p.add_argument(
        "--stabilization",
        default=defaults.resource_stabilization,
        help="flink.rescale.stabilizationTimeout for the run (a Flink duration, e.g. 6s)",
    )
    p.add_argument(
        "--real-model", action="store_true", help="embed with the real model, not the null one"
    )
    p.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    p.add_argument(
        "--broker-metrics",
        help="host:port of that broker's JMX exporter (log end offsets for the backlog rule; "
        "a local broker serves its own)",
    )
    p.add_argument("--json", metavar="PATH", help="write the results and timeline as JSON")
    p.add_argument("--png", metavar="PATH", help="draw backlog, TaskManagers, rate and signal")
    p.add_argument("-v", "--verbose", action="store_true", help="print every sample")
    p.set_defaults(handler=_handle)


def _suite_run(size: int | None) -> EntryOutput:
    options = ScalingOptions(load=LoadPlan(lead_s=float(size or 10)))
    run, figures = run_bench(options, progress=lambda line: None)
    rows = [
        {
            "name": f"{f.kind} {f.before}->{f.after}",
            "p_before": f.parallelism_before,
            "p_after": f.parallelism_after,
            "cross_to_running_s": f.cross_to_running_s,
            "decide_to_running_s": f.decide_to_running_s,
        }
        for f in figures.scale_events
    ]
    return EntryOutput(
        {"rescales": rows},
        [
            "jobs/embed_clicks.sql, application mode, reactive scheduler, 1 slot per "
            "TaskManager, 3 input partitions; TaskManagers added/removed by the HPA step.",
            f"backlog under target {_s(figures.cross_to_under_s)} s after the first crossing; "
            f"committed records/s before {_s(figures.rate_before)}, "
            f"after {_s(figures.rate_after)}; exactly-once: {run.exactly_once}",
        ],
    )


#: In ``flinkai bench suite``; size = seconds of the measured drain rate kept waiting.
suite_entry = SuiteEntry(
    name="scaling",
    description="Reactive rescaling under load: signal-to-running times, drain, rate, "
    "exactly-once.",
    sizes={"quick": 8, "default": 10, "full": 15},
    run=_suite_run,
    chart=("name", "cross_to_running_s"),
)
