"""``flinkai bench windows``: adaptive against fixed windows, on Flink, at the same load.

``jobs/drift_monitor.sql`` runs on the local broker and MiniCluster twice per load,
once with the adaptive window rule (``clamp(base + delay / 10, min, max)``, the
defaults) and once with fixed windows of the same base length (``min = max = base``:
the same operator, so the same cost per event). Two loads:

* ``paced``: a stationary AG News stream sent at ``rate`` events/s for ``seconds``,
  each event stamped with the time it is sent (no delay of its own);
* ``backlog``: ``backlog`` events sent at once, so the job falls behind and the
  processing delay grows while it drains.

One key, one partition, so the windows hold consecutive events in offset order: the
n-th event is in the window whose running count first reaches n. An event's latency
is its window's close time (processing time) minus the time it was sent, the time
until its aggregate exists. Throughput comes from when the events were processed: a
window's mean processing time is its events' mean send time (their event time) plus
its measured mean delay, and the rate is the events after the first measured window
over the time between its mean processing time and the last one's. Window lengths do
not enter it, so longer windows do not read as a slower job. Windows are written with
exactly-once, so their visibility on Kafka adds the checkpoint wait to both modes
alike; it is left out.

A warm-up (its window must come out) runs before each measurement and is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flinkai.config import AdaptiveWindowConfig
from flinkai.errors import SetupError
from flinkai_bench.embed.stats import percentiles
from flinkai_bench.shared.broker import broker
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = [
    "LOADS",
    "MODES",
    "RunFigures",
    "WindowsOptions",
    "event_latencies",
    "figures",
    "processing_rate",
    "register",
    "run_windows",
    "suite_entry",
]

MODES = ("adaptive", "fixed")
LOADS = ("paced", "backlog")
WARMUP = 20


@dataclass(frozen=True)
class WindowsOptions:
    """Sizes of one run.

    Attributes:
        rate: Events/s of the paced load (keep it under what the model embeds).
        seconds: Length of the paced load.
        backlog: Events sent at once in the backlog load.
        loads / modes: What to run.
        window: The adaptive rule; fixed windows use its ``base_ms`` as min and max.
    """

    rate: float = 40.0
    seconds: float = 45.0
    backlog: int = 5000
    loads: tuple[str, ...] = LOADS
    modes: tuple[str, ...] = MODES
    window: AdaptiveWindowConfig = field(default_factory=AdaptiveWindowConfig)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.seconds > 0 and self.backlog > 0):
            raise SetupError("bench windows: rate, seconds and backlog must be > 0")
        bad = [x for x in (*self.loads, *self.modes) if x not in (*LOADS, *MODES)]
        if bad or not self.loads or not self.modes:
            raise SetupError(
                f"bench windows: unknown or empty loads/modes {bad}; loads {LOADS}, modes {MODES}"
            )

    def window_for(self, mode: str) -> AdaptiveWindowConfig:
        """The window parameters of a mode."""
        w = self.window
        if mode == "adaptive":
            return w
        return AdaptiveWindowConfig(base_ms=w.base_ms, min_ms=w.base_ms, max_ms=w.base_ms)


@dataclass(frozen=True)
class RunFigures:
    """One (load, mode) run."""

    load: str
    mode: str
    events: int
    windows: int
    sent_per_s: float | None
    events_per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    mean_window_ms: float | None
    max_window_ms: int | None
    max_delay_ms: float | None


def event_latencies(sent_ms: Sequence[int], windows: Sequence[dict[str, Any]]) -> list[float]:
    """Per event, its window's close time minus its send time, in send order.

    Args:
        sent_ms: Send time of every event, in offset order.
        windows: The window rows in output order (one key, one partition).

    Raises:
        ValueError: The windows do not hold exactly the events sent (a lost or
            duplicated event would otherwise shift every later latency).
    """
    counted = sum(int(w["n"]) for w in windows)
    if counted != len(sent_ms):
        raise ValueError(f"the windows hold {counted} events, {len(sent_ms)} were sent")
    ends = itertools.chain.from_iterable(
        itertools.repeat(int(w["window_end_ms"]), int(w["n"])) for w in windows
    )
    return [float(end - sent) for end, sent in zip(ends, sent_ms, strict=True)]


def figures(
    load: str, mode: str, sent_ms: Sequence[int], windows: Sequence[dict[str, Any]], skip: int
) -> RunFigures:
    """A run's figures, leaving out the first ``skip`` events and the windows that hold them."""
    latencies = event_latencies(sent_ms, windows)[skip:]
    seen, measured = 0, []
    for w in windows:
        seen += int(w["n"])
        if seen > skip:
            measured.append(w)
    p50, p99 = percentiles(latencies)
    lengths = [int(w["window_end_ms"]) - int(w["window_start_ms"]) for w in measured]
    return RunFigures(
        load=load,
        mode=mode,
        events=len(latencies),
        windows=len(measured),
        sent_per_s=_sent_rate(sent_ms[skip:]),
        events_per_s=processing_rate(sent_ms, windows, len(windows) - len(measured)),
        p50_ms=p50,
        p99_ms=p99,
        mean_window_ms=sum(lengths) / len(lengths) if lengths else None,
        max_window_ms=max(lengths) if lengths else None,
        max_delay_ms=max((float(w["delay_ms"]) for w in measured), default=None),
    )


def _sent_rate(sent_ms: Sequence[int]) -> float | None:
    span_ms = sent_ms[-1] - sent_ms[0] if sent_ms else 0
    return (len(sent_ms) - 1) / span_ms * 1000 if span_ms > 0 else None


def processing_rate(
    sent_ms: Sequence[int], windows: Sequence[dict[str, Any]], first: int = 0
) -> float | None:
    """Events/s processed from window ``first`` on (see the module docstring).

    ``None`` with fewer than two windows or no time between them.
    """
    times: list[float] = []
    start = 0
    for w in windows:
        n = int(w["n"])
        times.append(sum(sent_ms[start : start + n]) / n + float(w["delay_ms"]))
        start += n
    counts = [int(w["n"]) for w in windows[first:]]
    span_ms = times[-1] - times[first] if len(counts) >= 2 else 0.0
    return sum(counts[1:]) / span_ms * 1000 if span_ms > 0 else None


def _texts(n: int) -> list[str]:
    """A stationary stream: AG News articles of all four topics, in file order."""
    from flinkai.datasets import load_ag_news

    rows = load_ag_news()
    return [rows[i % len(rows)][1] for i in range(n)]


def _windows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from flinkai.kafka.admin import read_to_end_offsets

    snap = read_to_end_offsets(bootstrap, topic, timeout_s=30)
    return [json.loads(r.value or b"null") for r in snap.records]


def _wait_for(bootstrap: str, topic: str, events: int, timeout_s: float) -> list[dict[str, Any]]:
    from flinkai.local.process import wait_until

    rows: list[dict[str, Any]] = []

    def held() -> int:
        return sum(int(w["n"]) for w in rows)

    def enough() -> bool:
        nonlocal rows
        rows = _windows(bootstrap, topic)
        return held() >= events

    if not wait_until(enough, timeout_s, poll_s=2.0):
        raise SetupError(
            f"bench windows: {held()} of {events} events came out in {timeout_s:.0f} s"
        )
    return rows


def run_one(
    bootstrap: str, load: str, mode: str, options: WindowsOptions, texts: Sequence[str]
) -> RunFigures:
    """One run of the job on fresh topics; the job is cancelled at the end."""
    from confluent_kafka import Producer

    from flinkai.config import load_config
    from flinkai.kafka.admin import create_topics
    from flinkai.runtime.runner import RunOptions, run_script

    root = Path(__file__).resolve().parents[2]
    rid = uuid.uuid4().hex[:8]
    source, drift, windows, dlq = (f"bw-{p}-{rid}" for p in ("in", "drift", "win", "dlq"))
    create_topics(bootstrap, [source, drift, windows, dlq])
    base = load_config()
    w = options.window_for(mode)
    conf = {f"flinkai.adaptive_window.{k}": str(v) for k, v in asdict(w).items()}
    config = base.with_overrides(runtime={"flink_conf": {**base.runtime.flink_conf, **conf}})
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap, "TEXT_TOPIC": source, "DRIFT_TOPIC": drift,
        "WINDOW_TOPIC": windows, "DLQ_TOPIC": dlq, "SCAN_BOUNDED_MODE": "unbounded",
        "GROUP_ID": f"bw-{rid}",
    }  # fmt: skip
    sent: list[int] = []
    # One producer for the whole run: a client per chunk would cost more than the
    # pacing interval and the offered rate would fall short of ``rate``.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})

    def send(items: Sequence[str]) -> None:
        now = int(time.time() * 1000)
        sent.extend([now] * len(items))
        for t in items:
            value = json.dumps({"stream_id": "s", "text": t, "event_time": now}).encode()
            producer.produce(source, value)
        producer.poll(0)

    result = run_script(
        root / "jobs" / "drift_monitor.sql", config, RunOptions(variables=variables, wait=False)
    )
    try:
        send(texts[:WARMUP])
        producer.flush(30)
        _wait_for(bootstrap, windows, WARMUP, 300)
        rest = texts[WARMUP:]
        if load == "backlog":
            send(rest)
        else:
            chunk = max(1, round(options.rate / 10))
            start = time.monotonic()
            for i in range(0, len(rest), chunk):
                time.sleep(max(0.0, start + i / options.rate - time.monotonic()))
                send(rest[i : i + chunk])
        if producer.flush(60) > 0:
            raise SetupError("bench windows: the broker did not take every event in 60 s")
        rows = _wait_for(bootstrap, windows, len(sent), 120 + len(rest) / 10)
    finally:
        client = getattr(result, "job_client", None)
        if client is not None:
            with contextlib.suppress(Exception):  # a job that already ended
                client.cancel().result()
    return figures(load, mode, sent, rows, WARMUP)


def run_windows(
    options: WindowsOptions,
    bootstrap: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[RunFigures]:
    """Every (load, mode) run, loads outermost, on one broker."""
    sizes = {"paced": round(options.rate * options.seconds), "backlog": options.backlog}
    out: list[RunFigures] = []
    with broker(bootstrap) as servers:
        for load in options.loads:
            texts = _texts(WARMUP + sizes[load])
            for mode in options.modes:
                progress(f"{load} / {mode}: {sizes[load]} events")
                out.append(run_one(servers, load, mode, options, texts))
                r = out[-1]
                progress(f"  p50/p99 {r.p50_ms} / {r.p99_ms} ms, {r.events_per_s} ev/s")
    return out


def _cell(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: Sequence[RunFigures]) -> str:
    """The runs as a table."""
    lines = [
        f"{'load':<8} {'mode':<9} {'events':>6} {'windows':>7} {'sent/s':>7} {'ev/s':>7} "
        f"{'p50 ms':>8} "
        f"{'p99 ms':>8} {'mean win ms':>11} {'max win ms':>10} {'max delay ms':>12}"
    ]
    for r in rows:
        lines.append(
            f"{r.load:<8} {r.mode:<9} {r.events:>6} {r.windows:>7} "
            f"{_cell(r.sent_per_s, '.1f'):>7} "
            f"{_cell(r.events_per_s, '.1f'):>7} {_cell(r.p50_ms, '.0f'):>8} "
            f"{_cell(r.p99_ms, '.0f'):>8} {_cell(r.mean_window_ms, '.0f'):>11} "
            f"{_cell(r.max_window_ms, 'd'):>10} {_cell(r.max_delay_ms, '.0f'):>12}"
        )
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    options = WindowsOptions(
        rate=args.rate,
        seconds=args.seconds,
        backlog=args.backlog,
        loads=tuple(args.loads.split(",")),
        modes=tuple(args.modes.split(",")),
    )
    rows = run_windows(options, args.bootstrap, lambda m: print(m, file=sys.stderr, flush=True))
    print(format_table(rows))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"options": asdict(options), "runs": [asdict(r) for r in rows]}
        path.write_text(json.dumps(data, indent=2))
        print(f"wrote {path}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench windows``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "windows",
        help="adaptive vs fixed windows on Flink: p50/p99 latency and throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rate", type=float, default=40.0, help="paced load, events/s (40)")
    p.add_argument("--seconds", type=float, default=45.0, help="paced load length (45)")
    p.add_argument("--backlog", type=int, default=5000, help="events sent at once (5000)")
    p.add_argument("--loads", default=",".join(LOADS), help=f"subset of {','.join(LOADS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"subset of {','.join(MODES)}")
    p.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(handler=_handle)


def _suite_run(size: int | None) -> EntryOutput:
    seconds = float(size or 45)
    options = WindowsOptions(seconds=seconds, backlog=round(40 * seconds * 1.5))
    rows = run_windows(options)
    return EntryOutput(
        {"adaptive vs fixed windows": [{"name": f"{r.load}/{r.mode}", **asdict(r)} for r in rows]},
        [
            f"jobs/drift_monitor.sql on the MiniCluster; paced {options.rate:.0f} events/s for "
            f"{seconds:.0f} s, backlog {options.backlog} events at once. Latency: window close "
            "minus send time; fixed = min = max = base (5 s).",
        ],
    )


#: In ``flinkai bench suite``; size = seconds of the paced load.
suite_entry = SuiteEntry(
    name="windows",
    description="Adaptive vs fixed windows on Flink at the same load: p50/p99 latency, "
    "throughput, window lengths.",
    sizes={"quick": 15, "default": 45, "full": 90},
    run=_suite_run,
    chart=("name", "p99_ms"),
)
