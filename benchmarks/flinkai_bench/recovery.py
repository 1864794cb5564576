"""``flinkai bench recovery``: how long committed output stops after a failure.

Each scenario runs the exactly-once embed job (``jobs/embed_clicks.sql``) on a fresh
Kafka broker with a steady paced input, then injects the same fault a few times
into the same running job and measures, each time, the wall-clock time from the
fault to the first *new* record a ``read_committed`` consumer sees:

``taskmanager``
    A standalone session cluster (:class:`~flinkai.runtime.cluster.LocalFlinkCluster`);
    the TaskManager JVM and its Python workers are SIGKILLed and a new TaskManager is
    started right after, as a supervisor would. Phases, from the REST API:

    * *detect*: kill → the failure is recorded in the job's exception history;
    * *reschedule*: → the tasks are deployed again: the fixed restart delay, and
      waiting for the replacement TaskManager (launched at the kill) to register;
    * *task start*: → every task is ``RUNNING`` (state restored, Python worker
      started, model loaded);
    * *first commit*: tasks running → first new committed record (replay from the
      checkpointed offsets, then the next checkpoint commits the transaction).

``broker``
    The embedded MiniCluster; the Kafka broker is stopped (SIGTERM, clean shutdown)
    and started again on the same port and data dir. Phases: *broker stop* (stop
    issued → process gone), *broker start* (→ serving again) and *resume* (broker
    serving → first new committed record).

"New" means an id the consumer had not seen by one second after the fault: a
commit that was already on the wire when the fault hit is not counted as recovery.
Benchmarks measure and report; they never assert on timings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flinkai.config import Config, load_config
from flinkai.errors import FlinkAIError, SetupError
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port
from flinkai.runtime.cluster import FlinkRest, LocalFlinkCluster
from flinkai.runtime.environment import Target
from flinkai.testing import EmbedJob
from flinkai_bench.shared.suite import EntryOutput, SuiteEntry

__all__ = [
    "PHASES",
    "SCENARIOS",
    "CommitWatcher",
    "PhaseSummary",
    "RecoverySample",
    "format_table",
    "register",
    "run_recovery_bench",
    "suite_entry",
    "summarize",
]

log = logging.getLogger(__name__)

SCENARIOS = ("taskmanager", "broker")

#: Phases reported per scenario, in table order; ``total`` is fault → first new commit.
PHASES: dict[str, tuple[str, ...]] = {
    "taskmanager": ("detect", "reschedule", "task_start", "first_commit", "total"),
    "broker": ("broker_stop", "broker_start", "resume", "total"),
}

#: Records the commit watcher must see before the first fault: the job is warm.
_WARM_RECORDS = 10
#: Commits already on the wire at the fault still arrive within this; they are not "new".
_IN_FLIGHT_GRACE_S = 1.0
_POLL_S = 0.2

Progress = Callable[[str], None]


@dataclass
class RecoverySample:
    """One fault and what followed.

    Attributes:
        scenario: ``taskmanager`` or ``broker``.
        rep: Repetition number, from 1.
        phases: Seconds per phase (see :data:`PHASES`); a phase that was not
            observed is missing.
        failures: Task failures the job recorded after the fault (REST exception
            history); each one made Flink restart the failed tasks.
        note: What went wrong, when the sample is incomplete.
        extra: Further timings not in the phase chain (seconds from the fault), e.g.
            ``tm_registered_s``.
    """

    scenario: str
    rep: int
    phases: dict[str, float] = field(default_factory=dict)
    failures: int = 0
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float | None:
        """Fault → first new committed record, or ``None`` when it never came."""
        return self.phases.get("total")


@dataclass(frozen=True)
class PhaseSummary:
    """min / median / max of one phase over the repetitions of a scenario."""

    scenario: str
    phase: str
    n: int
    min_s: float
    median_s: float
    max_s: float


class CommitWatcher:
    """Reads output topics with ``read_committed`` in a thread, noting when each record shows.

    Args:
        bootstrap: Kafka bootstrap address.
        topics: Topics to watch (results and dead letters).
    """

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self._lock = threading.Lock()
        #: (monotonic arrival time, user id) per record, in arrival order.
        self._arrivals: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-watcher", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> CommitWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def count(self) -> int:
        """Records seen so far.

        Raises:
            SetupError: The watcher thread failed; nothing more will be seen.
        """
        if self.error is not None:
            raise SetupError(f"the commit watcher failed: {self.error}") from self.error
        with self._lock:
            return len(self._arrivals)

    def mark(self) -> int:
        """A position in the arrival log, for :meth:`first_new_since`."""
        return self.count

    def first_new_since(self, mark: int) -> float | None:
        """Arrival time of the first record after ``mark`` whose id was not seen before it."""
        with self._lock:
            seen = {uid for _, uid in self._arrivals[:mark]}
            for at, uid in self._arrivals[mark:]:
                if uid not in seen:
                    return at
        return None

    def _run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id="flinkai-bench-watcher",
                group_id=None,
                enable_auto_commit=False,
                isolation_level="read_committed",
                # Reconnect quickly once a restarted broker is back.
                reconnect_backoff_max_ms=500,
            )
            parts = [
                TopicPartition(t, p)
                for t in self.topics
                for p in sorted(consumer.partitions_for_topic(t) or {0})
            ]
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=int(_POLL_S * 1000))
                now = time.monotonic()
                rows = [(now, _user_id(r.value)) for rs in batch.values() for r in rs]
                if rows:
                    with self._lock:
                        self._arrivals.extend(rows)
            consumer.close()
        except Exception as e:  # kafka-python raises plain Exceptions too; count re-raises it
            self.error = e
            log.error("commit watcher failed: %s", e)


def _user_id(value: bytes | None) -> str:
    try:
        data = json.loads(value or b"{}")
    except ValueError:
        return ""
    # Dead letters carry no user id; their source offset identifies them.
    return str(data.get("user_id") or f"dlq@{data.get('source_offset')}")


class _PacedProducer:
    """Unique click events at a steady rate until stopped; rides out broker outages."""

    def __init__(self, bootstrap: str, topic: str, per_second: float) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.per_second = per_second
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)
        self._prefix = uuid.uuid4().hex[:6]

    def __enter__(self) -> _PacedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        import kafka.errors

        from flinkai.kafka.admin import produce

        chunk = max(1, int(self.per_second / 5))
        while not self._stop.is_set():
            values = [
                json.dumps(
                    {
                        "user_id": f"r-{self._prefix}-{i}",
                        "click_text": f"recovery event {i} about topic {i % 7}",
                        "event_time": 1764576000000 + i,
                    }
                ).encode()
                for i in range(self.sent, self.sent + chunk)
            ]
            started = time.monotonic()
            try:
                self.sent += produce(self.bootstrap, self.topic, values, timeout_s=5.0)
            except (FlinkAIError, kafka.errors.KafkaError) as e:
                # The broker scenario takes Kafka away on purpose; try again shortly.
                # (Closing the producer can raise kafka-python's own timeout error.)
                log.debug("producer paused: %s", e)
                self._stop.wait(1.0)
                continue
            self._stop.wait(max(0.0, chunk / self.per_second - (time.monotonic() - started)))


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(_POLL_S)
    raise SetupError(f"{what} within {timeout_s:.0f} s")


def _safe(call: Callable[[], Any], default: Any) -> Any:
    """A REST read that may fail while the job is between states."""
    try:
        return call()
    except SetupError:
        return default


def _failures_since(api: FlinkRest, job_id: str, wall_s: float) -> list[dict[str, Any]]:
    """Exception-history entries the JobManager recorded at or after ``wall_s`` (epoch s)."""
    entries: list[dict[str, Any]] = _safe(lambda: api.job_exceptions(job_id), [])
    return [e for e in entries if int(e.get("timestamp") or 0) >= wall_s * 1000]


def _steady(api: FlinkRest, job_id: str, watcher: CommitWatcher, timeout_s: float) -> None:
    """Wait until the job runs, a checkpoint completed and output flows again."""
    mark = watcher.mark()
    ack = _safe(lambda: api.latest_checkpoint_ack_ms(job_id), 0)
    _wait(
        lambda: bool(_safe(lambda: api.tasks_running(job_id), False)),
        timeout_s,
        "the job was not running again",
    )
    _wait(
        lambda: _safe(lambda: api.latest_checkpoint_ack_ms(job_id), 0) > ack,
        timeout_s,
        "no checkpoint completed",
    )
    _wait(lambda: watcher.count > mark, timeout_s, "no committed output")


def _mid_checkpoint_interval(api: FlinkRest, job_id: str, config: Config, timeout_s: float) -> None:
    """Return halfway between two checkpoints, so every fault hits the sink in the same
    state: an open transaction holding about half an interval of records."""
    interval_s = config.runtime.checkpoint_interval_ms / 1000
    ack = _safe(lambda: api.latest_checkpoint_ack_ms(job_id), 0)
    _wait(
        lambda: _safe(lambda: api.latest_checkpoint_ack_ms(job_id), 0) > ack,
        timeout_s,
        "no checkpoint completed",
    )
    ack = _safe(lambda: api.latest_checkpoint_ack_ms(job_id), 0)
    time.sleep(max(0.0, ack / 1000 + interval_s / 2 - time.time()))


def _config(base: Config, reps: int, rest_port: int | None) -> Config:
    # One restart per injected fault plus headroom, so the last rep does not exhaust
    # the fixed-delay budget and fail the job.
    attempts = max(base.runtime.restart_attempts, reps + 3)
    flink_conf = dict(base.runtime.flink_conf)
    if rest_port is not None:
        flink_conf["rest.port"] = str(rest_port)
    return base.with_overrides(runtime={"restart_attempts": attempts, "flink_conf": flink_conf})


def _script() -> Path:
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise SetupError("the recovery bench needs a source checkout (jobs/)")
    return root / "jobs" / "embed_clicks.sql"


def _bench_taskmanager(
    work: Path, base: Config, reps: int, rate: float, timeout_s: float, progress: Progress
) -> list[RecoverySample]:
    samples: list[RecoverySample] = []
    progress("taskmanager: starting Kafka and a standalone Flink cluster ...")
    with (
        LocalKafka(work / "kafka-tm", port=free_port()) as broker,
        LocalFlinkCluster(work / "flink", slots=1) as cluster,
    ):
        job = EmbedJob(
            broker.bootstrap,
            _script(),
            _config(base, reps, None),
            Target(cluster.jobmanager),
            prefix="r",
        )
        job.start()
        api = cluster.api
        try:
            with (
                _PacedProducer(broker.bootstrap, job.topics[0], rate),
                CommitWatcher(broker.bootstrap, job.topics[1:]) as watcher,
            ):
                progress(f"taskmanager: job {job.job_id} submitted; waiting for output ...")
                _wait(lambda: watcher.count >= _WARM_RECORDS, timeout_s, "no output")
                for rep in range(1, reps + 1):
                    _steady(api, job.job_id, watcher, timeout_s)
                    _mid_checkpoint_interval(api, job.job_id, job.config, timeout_s)
                    sample = _kill_taskmanager_once(cluster, job.job_id, watcher, timeout_s)
                    sample.rep = rep
                    samples.append(sample)
                    progress(f"taskmanager {rep}/{reps}: {_describe(sample)}")
                    if sample.total_s is None:
                        break  # the job did not recover; later reps would measure nothing
        finally:
            job.cancel()
    return samples


def _kill_taskmanager_once(
    cluster: LocalFlinkCluster, job_id: str, watcher: CommitWatcher, timeout_s: float
) -> RecoverySample:
    api = cluster.api
    sample = RecoverySample("taskmanager", 0)
    t0, t0_wall = time.monotonic(), time.time()
    cluster.kill_taskmanager()
    # A supervisor would bring a replacement up at once.
    replacement = cluster.start_taskmanager(wait=False)
    time.sleep(_IN_FLIGHT_GRACE_S)
    mark = watcher.mark()
    deadline = t0 + timeout_s
    first: float | None = None
    registered: float | None = None
    while time.monotonic() < deadline:
        if registered is None and replacement.resource_id in api.taskmanagers():
            registered = time.monotonic()
        first = watcher.first_new_since(mark)
        if first is not None:
            break
        time.sleep(_POLL_S)
    if registered is not None:
        sample.extra["tm_registered_s"] = registered - t0
    # Phase boundaries come from the JobManager's own timestamps (epoch ms), not from
    # polling: the REST API caches job details for a few seconds.
    failures = _failures_since(api, job_id, t0_wall)
    sample.failures = len(failures)
    marks = {"fault": t0_wall * 1000}
    if failures:
        marks["detect"] = min(int(e["timestamp"]) for e in failures)
    if first is None:
        sample.note = f"no new committed output within {timeout_s:.0f} s"
    else:
        sample.phases["total"] = first - t0
        marks.update(_current_attempt_times(api, job_id, since_ms=marks.get("detect", 0)))
        marks["first_commit"] = (t0_wall + first - t0) * 1000
        order = ["fault", "detect", "reschedule", "task_start", "first_commit"]
        # Each phase is named after the mark it ends at; a chain with a gap would
        # misattribute time, so it is reported only when complete.
        if all(k in marks for k in order):
            if marks["task_start"] > marks["first_commit"]:
                # The committer commits, while the task is still initializing, a
                # transaction the last checkpoint had pre-committed before the kill.
                sample.note = "first new records were committed during restore"
            for prev, cur in itertools.pairwise(order):
                span = min(marks[cur], marks["first_commit"]) - min(
                    marks[prev], marks["first_commit"]
                )
                sample.phases[cur] = span / 1000
    return sample


def _current_attempt_times(api: FlinkRest, job_id: str, since_ms: float) -> dict[str, float]:
    """When the recovered attempt's tasks were deployed and ran (epoch ms), if known.

    ``reschedule`` is when the last task started DEPLOYING (a slot was free again),
    ``task_start`` when the last task turned RUNNING (state restored, Python worker
    and model up). Waits out the REST cache, bounded.
    """
    deadline = time.monotonic() + 10.0
    while True:
        times = _safe(lambda: api.subtask_times(job_id), [])
        deploying = [t.get("DEPLOYING", 0) for t in times]
        running = [t.get("RUNNING", 0) for t in times]
        if times and min(running) >= since_ms > 0 and min(deploying) >= since_ms:
            return {"reschedule": float(max(deploying)), "task_start": float(max(running))}
        if time.monotonic() >= deadline:
            return {}
        time.sleep(1.0)


def _bench_broker(
    work: Path, base: Config, reps: int, rate: float, timeout_s: float, progress: Progress
) -> list[RecoverySample]:
    samples: list[RecoverySample] = []
    rest_port = free_port()
    api = FlinkRest(f"127.0.0.1:{rest_port}")
    progress("broker: starting Kafka and the job on the embedded MiniCluster ...")
    with LocalKafka(work / "kafka-broker", port=free_port()) as broker:
        job = EmbedJob(broker.bootstrap, _script(), _config(base, reps, rest_port), prefix="r")
        job.start()
        try:
            with (
                _PacedProducer(broker.bootstrap, job.topics[0], rate),
                CommitWatcher(broker.bootstrap, job.topics[1:]) as watcher,
            ):
                progress(f"broker: job {job.job_id} running; waiting for output ...")
                _wait(lambda: watcher.count >= _WARM_RECORDS, timeout_s, "no output")
                for rep in range(1, reps + 1):
                    _steady(api, job.job_id, watcher, timeout_s)
                    sample = _restart_broker_once(broker, api, job.job_id, watcher, timeout_s)
                    sample.rep = rep
                    samples.append(sample)
                    progress(f"broker {rep}/{reps}: {_describe(sample)}")
                    if sample.total_s is None:
                        break
        finally:
            job.cancel()
    return samples


def _restart_broker_once(
    broker: LocalKafka, api: FlinkRest, job_id: str, watcher: CommitWatcher, timeout_s: float
) -> RecoverySample:
    sample = RecoverySample("broker", 0)
    t0, t0_wall = time.monotonic(), time.time()
    broker.stop()
    down = time.monotonic()
    # Nothing can be committed while the broker is down; what arrived by now is old.
    mark = watcher.mark()
    broker.start()  # same port and data dir: a broker restart
    up = time.monotonic()
    sample.phases["broker_stop"] = down - t0
    sample.phases["broker_start"] = up - down
    first: float | None = None
    while time.monotonic() < up + timeout_s:
        first = watcher.first_new_since(mark)
        if first is not None:
            break
        time.sleep(_POLL_S)
    if first is not None:
        sample.phases["resume"] = first - up
        sample.phases["total"] = first - t0
    else:
        sample.note = f"no new committed output within {timeout_s:.0f} s of the broker's return"
    sample.failures = len(_failures_since(api, job_id, t0_wall))
    return sample


def _describe(sample: RecoverySample) -> str:
    parts = [
        f"{k.replace('_', ' ')} {sample.phases[k]:.1f} s"
        for k in PHASES[sample.scenario]
        if k in sample.phases
    ]
    parts += [
        f"{k.removesuffix('_s').replace('_', ' ')} at {v:.1f} s" for k, v in sample.extra.items()
    ]
    parts.append(f"{sample.failures} task failure(s) recorded")
    return ", ".join(parts) + (f" ({sample.note})" if sample.note else "")


def run_recovery_bench(
    scenarios: Sequence[str] = SCENARIOS,
    reps: int = 3,
    rate: float = 20.0,
    timeout_s: float = 240.0,
    config: Config | None = None,
    progress: Progress = print,
) -> list[RecoverySample]:
    """Run the scenarios; one sample per injected fault.

    Args:
        scenarios: Subset of :data:`SCENARIOS`.
        reps: Faults per scenario (all into the same running job).
        rate: Input events per second while measuring.
        timeout_s: Bound on each wait: start-up, recovery, steady state.
        config: Base config (defaults from ``load_config``); restart attempts are
            raised to cover ``reps``.
        progress: Where progress lines go.

    Raises:
        SetupError: Jars, Java or the checkout are missing, or the job never got going.
    """
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SetupError(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    base = config or load_config()
    samples: list[RecoverySample] = []
    with tempfile.TemporaryDirectory(prefix="flinkai-bench-recovery-") as tmp:
        for scenario in scenarios:
            run = _bench_taskmanager if scenario == "taskmanager" else _bench_broker
            samples += run(Path(tmp), base, reps, rate, timeout_s, progress)
    return samples


def summarize(samples: Sequence[RecoverySample]) -> list[PhaseSummary]:
    """min / median / max per scenario and phase, over the samples that have the phase."""
    rows = []
    for scenario, phases in PHASES.items():
        for phase in phases:
            values = [
                s.phases[phase] for s in samples if s.scenario == scenario and phase in s.phases
            ]
            if values:
                rows.append(
                    PhaseSummary(
                        scenario,
                        phase,
                        len(values),
                        min(values),
                        statistics.median(values),
                        max(values),
                    )
                )
    return rows


def format_table(rows: Sequence[PhaseSummary]) -> str:
    """The summary as a fixed-width table (seconds)."""
    header = f"{'scenario':<12} {'phase':<13} {'n':>3} {'min s':>7} {'median s':>9} {'max s':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.scenario:<12} {r.phase.replace('_', ' '):<13} {r.n:>3} "
            f"{r.min_s:>7.1f} {r.median_s:>9.1f} {r.max_s:>7.1f}"
        )
    return "\n".join(lines)


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    # kafka-python logs every reconnect during a broker restart; that is the point here.
    noisy = [logging.getLogger(n) for n in ("kafka", "apache_beam")]
    levels = [lg.level for lg in noisy]
    for lg in noisy:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(noisy, levels, strict=True):
            lg.setLevel(level)


def _handle(args: argparse.Namespace) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    config = load_config(getattr(args, "config", None))

    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    with _quiet_libraries():
        samples = run_recovery_bench(
            scenarios, args.reps, args.rate, args.timeout, config, progress
        )
    rows = summarize(samples)
    print(format_table(rows))
    incomplete = [s for s in samples if s.total_s is None]
    for s in incomplete:
        print(f"{s.scenario} rep {s.rep}: {s.note}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "scenarios": scenarios,
            "reps": args.reps,
            "rate_per_s": args.rate,
            "samples": [{**asdict(s), "total_s": s.total_s} for s in samples],
            "summary": [asdict(r) for r in rows],
        }
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 1 if incomplete else 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench recovery``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recovery",
        help="time from a failure to the first new exactly-once output",
        description="Kill a TaskManager (standalone cluster) or restart the Kafka broker "
        "(MiniCluster) under the running embed job and time the recovery.",
    )
    parser.add_argument("--reps", type=int, default=3, help="faults per scenario (3)")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated subset of: {', '.join(SCENARIOS)}",
    )
    parser.add_argument("--rate", type=float, default=20.0, help="input events per second (20)")
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="bound on each wait, seconds (240)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the samples as JSON")
    parser.set_defaults(handler=_handle)


# -- flinkai bench suite -------------------------------------------------------------------


def _suite_run(reps: int | None) -> EntryOutput:
    """The suite's recovery entry: ``reps`` faults per scenario, summarised per phase."""
    with _quiet_libraries():
        samples = run_recovery_bench(SCENARIOS, reps or 3, progress=lambda _line: None)
    summary = [
        {"scenario / phase": f"{r.scenario} {r.phase.replace('_', ' ')}", **asdict(r)}
        for r in summarize(samples)
    ]
    missing = [
        {"scenario": s.scenario, "rep": s.rep, "phase": p, "why": s.note or "not observed"}
        for s in samples
        for p in PHASES[s.scenario]
        if p not in s.phases
    ]
    tables = {
        "seconds per phase (min, median, max over the faults)": summary,
        "faults": [
            {
                "scenario": s.scenario,
                "rep": s.rep,
                **{p: s.phases.get(p, s.note or "not observed") for p in PHASES[s.scenario]},
                "task failures recorded": s.failures,
                "note": s.note,
            }
            for s in samples
        ],
    }
    if missing:
        tables["phases not observed"] = missing
    return EntryOutput(
        tables,
        [
            f"{reps or 3} fault(s) per scenario into one running exactly-once embed job, "
            "input paced at 20 events/s; total = fault to the first new committed record "
            "a read_committed consumer sees."
        ],
    )


#: In ``flinkai bench suite``; size = faults per scenario (quick 1, default 3, full 5).
suite_entry = SuiteEntry(
    name="recovery",
    description="Recovery of the exactly-once embed job: TaskManager SIGKILL (standalone "
    "cluster) and Kafka broker restart (MiniCluster), time by phase.",
    sizes={"quick": 1, "default": 3, "full": 5},
    run=_suite_run,
    chart=("scenario / phase", "median_s"),
)
