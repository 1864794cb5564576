"""``flinkai bench agents``: the risk decision graph against fair baselines, on one workload.

The workload (:class:`Workload`) cycles the fraud file's transactions with fresh
``tx_id`` s and event times moved forward by the file's span per cycle. Accounts come
from the 30,000-row account table: ``zipf`` draws each transaction's account with
probability proportional to ``1 / rank ** ZIPF_EXPONENT`` (exponent 1.0; ranks over a
seeded shuffle of the table), so accounts repeat as card accounts do; ``distinct`` gives
every transaction the next account of the shuffle (no account repeats within 30,000
transactions), the worst case for keyed state.

Legs (all on the same machine, sharing its cores; CPU time by process is reported):

* ``raw``: the operator's per-event function (:func:`~flinkai.operators.agents.process_transaction`,
  the plan runtime, two batch-1 model calls) in a plain loop, state in a dict;
* ``raw-vectorised``: :func:`~flinkai.operators.agents.process_bundle` on bundles of
  ``bundle`` transactions (one model call per model per bundle, one state read and
  write per account per bundle), state in a dict;
* ``services``: three aiohttp services on loopback called in series per transaction by
  a plain Kafka consumer (:mod:`flinkai_bench.agent_services`), the design's comparison;
* ``services-concurrent``: the same services called by an asyncio client with 1, 4, 16
  and 64 transactions in flight (each account's in arrival order); the best is the leg;
* ``job``: ``jobs/risk_decisions.sql`` on the local MiniCluster, Kafka in and out,
  **exactly-once** (the job's default: Kafka transactions committed by checkpoints);
* ``job-fixed``: the same job with an operator that parses and emits a fixed decision
  (the bridge's floor, :func:`flinkai_bench.agents_floor.fixed`), exactly-once;
* ``job-distinct``: ``job`` on the ``distinct`` workload.

Max QPS: the drain rate of a backlog sized for at least ``seconds_at_max`` seconds at
the leg's own rate (a probe backlog sizes it): the rate the leg sustains over that run.
Latency (``job`` and ``job-fixed``): a paced run at a quarter of the job's max QPS;
per transaction, from send to the decision's write on the sink topic (seen by a
``read_uncommitted`` consumer) and to its visibility at a ``read_committed`` consumer
(after the checkpoint that commits it; interval in the JSON). CPU ms per decision: the
system under test's processes over the backlog (the broker and this process, the load
generator, are reported by process but left out of the total).

``--legs ...,job-per-event`` adds the job with the operator keyed by account deciding
each event as it comes (:func:`flinkai_bench.agents_floor.decide_per_event`, the
job's operator before it batched by bucket). ``--floor`` runs the older decomposition of the job (:data:`FLOOR_LEGS`) instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flinkai_bench.embed.stats import event_latencies_ms, pacing_schedule, percentiles
from flinkai_bench.shared.broker import broker
from flinkai_bench.shared.rss import RssSampler, process_kind, tree_usage
from flinkai_bench.shared.suite import SuiteEntry

__all__ = [
    "FLOOR_LEGS",
    "GUARANTEES",
    "JOB_VARIANTS",
    "LEGS",
    "ZIPF_EXPONENT",
    "AgentsOptions",
    "LegResult",
    "Workload",
    "register",
    "run_agents",
    "step_costs",
    "suite_entry",
    "summary",
]

LEGS = ("raw", "raw-vectorised", "services", "services-concurrent", "job", "job-fixed",
        "job-distinct")  # fmt: skip
#: In-flight transactions tried by ``services-concurrent``; the best is reported.
INFLIGHT = (1, 4, 16, 64)
ZIPF_EXPONENT = 1.0
#: What each leg guarantees for its output.
GUARANTEES = {
    "raw": "none (in-process loop; state in a dict, nothing durable)",
    "raw-vectorised": "none (in-process loop; state in a dict, nothing durable)",
    "services": "none (at-most/at-least-once by chance: no offsets committed, acks=1, "
    "the limit service's state in memory)",
    "services-concurrent": "none (as services)",
    "job": "exactly-once (Kafka transactions committed by checkpoints)",
    "job-fixed": "exactly-once (Kafka transactions committed by checkpoints)",
    "job-distinct": "exactly-once (Kafka transactions committed by checkpoints)",
    "job-per-event": "exactly-once (Kafka transactions committed by checkpoints)",
}
#: Variants of the job leg: ``jobs/risk_decisions.sql`` with another operator named, or
#: settings added. ``job-fixed``: a fixed decision (parse only); ``job-state``: + the
#: keyed ValueState read and write; the real operator is ``job``
#: (:mod:`flinkai_bench.agents_floor`). ``*-pykey``: keyed by PyFlink's ``key_by`` (a
#: Python key selector), the wiring before the key moved to the JVM. ``job-thread``: the
#: real operator in PyFlink's thread mode. ``job-langgraph``: the real operator with
#: ``'runtime' = 'langgraph'`` (LangGraph's Pregel invoke instead of the plan).
#: ``job-per-event``: the real operator keyed by account, deciding each event as it comes
#: (no buckets), with the Python state cache at the 10,000 accounts it had.
_OPERATOR_NAME = "flinkai.operators.agents.decide"
JOB_VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "job-fixed-pykey": ("flinkai_bench.agents_floor.fixed_python_key", {}),
    "job-fixed": ("flinkai_bench.agents_floor.fixed", {}),
    "job-state": ("flinkai_bench.agents_floor.state_only", {}),
    "job-pykey": ("flinkai_bench.agents_floor.decide_python_key", {}),
    "job-thread": ("flinkai.operators.agents.decide", {"python.execution-mode": "thread"}),
    "job-langgraph": ("flinkai_bench.agents_floor.decide_langgraph", {}),
    "job-per-event": (
        "flinkai_bench.agents_floor.decide_per_event",
        {"python.state.cache-size": "10000"},
    ),
}
FLOOR_LEGS = ("job-fixed-pykey", "job-fixed", "job-state", "job-pykey", "job-langgraph", "job")
_OPERATOR = "flinkai.operators.agents.decide"


@dataclass(frozen=True)
class AgentsOptions:
    """Sizes of one run.

    Attributes:
        seconds_at_max: The max-QPS backlog lasts at least this long at the leg's rate.
        probe: Transactions of the probe backlog that sizes it.
        max_events: Cap on a backlog (keeps a run short).
        concurrent_seconds: Backlog length for each in-flight setting of
            ``services-concurrent`` (the best is then reported).
        paced_seconds: Length of the paced run at a quarter of the job's max.
        warmup: Transactions answered before timing starts.
        bundle: Transactions per bundle in ``raw-vectorised``.
        legs: Which legs to run.
        rate: Pace at this rate instead of a quarter of the job's max.
    """

    seconds_at_max: float = 30.0
    probe: int = 1500
    max_events: int = 150000
    concurrent_seconds: float = 8.0
    paced_seconds: float = 15.0
    warmup: int = 200
    bundle: int = 100
    legs: tuple[str, ...] = LEGS
    rate: float | None = None


@dataclass
class LegResult:
    """One leg's figures (``None``: not measured in this leg).

    ``backlog``/``backlog_s``: the max-QPS backlog's size and drain time; ``received``:
    decisions seen of the paced run (``sent``) when the leg has one, else of the
    backlog; ``p50_ms``/``p99_ms``: paced, from the feed's send to the sink write (the
    output record's CreateTime, see :class:`_Watcher`); ``visible_*``: paced, to a
    ``read_committed`` consumer's poll.
    """

    leg: str
    workload: str
    guarantee: str
    max_qps: float
    backlog: int
    backlog_s: float
    received: int
    cpu_ms_per_decision: float
    cpu_ms_per_decision_by_process: dict[str, float]
    peak_rss_mb: float
    paced_rate: float | None = None
    sent: int | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    visible_received: int | None = None
    visible_p50_ms: float | None = None
    visible_p99_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Workload:
    """Transactions cycled from the fraud file with fresh ids, accounts drawn per ``kind``.

    Successive :meth:`take` calls continue the stream (ids, times and draws), so a
    leg's warm-up, backlog and paced run are one stream.

    Args:
        pool: :func:`~flinkai.agents.data.transaction_events` of the fraud file.
        account_ids: The account table's ids.
        kind: ``zipf`` or ``distinct``.
        seed: Seeds the shuffle of the accounts and the draws.
    """

    def __init__(self, pool: Sequence[dict[str, Any]], account_ids: Sequence[str], kind: str,
                 seed: int = 39, exponent: float = ZIPF_EXPONENT) -> None:  # fmt: skip
        if kind not in ("zipf", "distinct"):
            raise ValueError(f"unknown workload {kind!r}; expected zipf or distinct")
        self.pool, self.kind, self.exponent = list(pool), kind, exponent
        rng = np.random.default_rng(seed)
        self.accounts = [account_ids[i] for i in rng.permutation(len(account_ids))]
        times = [int(e["ts"]) for e in self.pool]
        self.span_ms = max(times) - min(times) + 1000
        weights = 1.0 / np.arange(1, len(self.accounts) + 1) ** exponent
        self._p = weights / weights.sum()
        self._rng = rng
        self._draws = np.empty(0, dtype=np.int64)
        self.taken = 0

    def _rank(self, i: int) -> int:
        if self.kind == "distinct":
            return i % len(self.accounts)
        while i >= len(self._draws):
            more = self._rng.choice(len(self.accounts), size=65536, p=self._p)
            self._draws = np.concatenate([self._draws, more])
        return int(self._draws[i])

    def take(self, n: int, prefix: str) -> list[dict[str, Any]]:
        """The next ``n`` transactions, ids ``<prefix>-<index>``."""
        out = []
        for i in range(self.taken, self.taken + n):
            base = self.pool[i % len(self.pool)]
            cycle = i // len(self.pool)
            out.append({**base, "tx_id": f"{prefix}-{i}", "ts": base["ts"] + cycle * self.span_ms,
                        "account_id": self.accounts[self._rank(i)]})  # fmt: skip
        self.taken += n
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "accounts": len(self.accounts),
                "zipf_exponent": self.exponent if self.kind == "zipf" else None,
                "cycle_span_ms": self.span_ms, "fraud_rows": len(self.pool)}  # fmt: skip


def repeat_stats(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How often accounts repeat in ``events``."""
    counts = Counter(e["account_id"] for e in events)
    return {"events": len(events), "distinct_accounts": len(counts),
            "repeat_share": 1 - len(counts) / max(1, len(events)),
            "top_account_share": max(counts.values(), default=0) / max(1, len(events))}  # fmt: skip


_BENCH = "bench (producer, consumers)"


def _label(pid: int, me: int) -> str:
    if pid == me:
        return _BENCH
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "flinkai_bench.agent_services" in cmd:
        parts = cmd.split("agent_services", 1)[1].split()
        return f"services: {parts[0] if parts else '?'}"
    if "flinkai run" in cmd or "/flinkai run" in cmd:
        return "job: flinkai run (Python worker in loopback)"
    kind = process_kind(pid)
    return "python" if kind == "python" else kind


class _Cpu:
    """CPU seconds of this process tree by process label, between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self._before: dict[int, int] = {}
        self.by: dict[str, float] = {}

    def start(self) -> None:
        self._before = tree_usage(self.me)[1]

    def stop(self) -> None:
        after = tree_usage(self.me)[1]
        hz = os.sysconf("SC_CLK_TCK")
        by: dict[str, float] = {}
        for pid, ticks in after.items():
            used = (ticks - self._before.get(pid, 0)) / hz
            label = _label(pid, self.me)
            by[label] = by.get(label, 0.0) + used
        self.by = by

    def total(self) -> float:
        """The system under test: all but the broker and the load generator (this process)."""
        return sum(v for k, v in self.by.items() if k not in ("kafka broker", _BENCH))


# -- raw loops ------------------------------------------------------------------------------


def _raw_rows(events: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["account_id"], json.dumps(e).encode(), 0, i) for i, e in enumerate(events)]


def run_raw(work: Workload, models: Path | None, accounts: Path | None,
            options: AgentsOptions, leg: str, backlog: int) -> LegResult:  # fmt: skip
    """The operator's functions in a plain loop (``raw``: per event; ``raw-vectorised``:
    per bundle), state in a dict; max QPS over ``backlog`` transactions."""
    from flinkai.agents.data import load_accounts
    from flinkai.agents.graph import RiskGraph
    from flinkai.agents.models import RiskModels
    from flinkai.operators.agents import process_bundle, process_transaction

    with RssSampler() as rss:
        graph = RiskGraph.from_models(RiskModels(models))
        table = load_accounts(accounts)
        states: dict[str, Any] = {}

        def loop(rows: list[tuple[Any, ...]]) -> None:
            if leg == "raw":
                for row in rows:
                    _, snap = process_transaction(states.get(row[0]), row, graph, table)
                    if snap is not None:
                        states[row[0]] = snap
            else:
                for at in range(0, len(rows), options.bundle):
                    process_bundle(rows[at : at + options.bundle], states.get,
                                   states.__setitem__, graph, table)  # fmt: skip

        loop(_raw_rows(work.take(options.warmup, "w")))
        events = work.take(backlog, "b")
        rows = _raw_rows(events)  # encoding is the producer's work, not timed
        cpu0, t0 = time.process_time(), time.perf_counter()
        loop(rows)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    per = cpu * 1000 / len(rows)
    return LegResult(leg, work.kind, GUARANTEES[leg], len(rows) / wall, len(rows), wall,
                     len(rows), per, {"bench (the loop)": per}, rss.peak_mb,
                     extra={"bundle": options.bundle if leg == "raw-vectorised" else 1,
                            "workload_repeats": repeat_stats(events)})  # fmt: skip


# -- Kafka legs -----------------------------------------------------------------------------


class _Watcher:
    """Consumes an output topic in a thread; notes when each ``tx_id`` first shows up.

    ``isolation``: ``read_uncommitted`` sees a decision when the sink writes it;
    ``read_committed`` when the transaction that holds it commits. ``arrived`` is when
    this consumer's poll returned it; ``written`` is the record's own timestamp: the
    sink's producer stamps it when it sends the record (CreateTime; the job's sinks
    write no timestamp of their own). The poll time runs late whenever this process is
    busy (kafka-python decodes in Python, beside the feed and the other watcher:
    its event loop reported tasks of 0.25-0.3 s), so latency to the sink write is taken
    from ``written``.
    """

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> None:
        self.bootstrap, self.topic, self.isolation = bootstrap, topic, isolation
        self.arrived: dict[str, float] = {}
        self.written: dict[str, float] = {}
        self._counts: Counter[str] = Counter()
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watcher:
        self._thread.start()
        self._ready.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def count(self, prefix: str) -> int:
        with self._lock:
            return self._counts[prefix]

    def last(self, prefix: str) -> float:
        with self._lock:
            return self._last[prefix]

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.arrived)

    def written_snapshot(self) -> dict[str, float]:
        """``tx_id`` -> the sink's send time (the record's CreateTime), in seconds."""
        with self._lock:
            return dict(self.written)

    def _run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 enable_auto_commit=False, fetch_max_wait_ms=5,
                                 isolation_level=self.isolation)  # fmt: skip
        part = TopicPartition(self.topic, 0)
        consumer.assign([part])
        consumer.seek_to_beginning(part)
        self._ready.set()
        while not self._stop.is_set():
            for records in consumer.poll(timeout_ms=50).values():
                now = time.time()
                for r in records:
                    key = str(json.loads(r.value or b"{}").get("tx_id"))
                    prefix = key.split("-", 1)[0]
                    with self._lock:
                        if key not in self.arrived:
                            self.arrived[key] = now
                            if r.timestamp_type == 0 and r.timestamp > 0:  # CreateTime
                                self.written[key] = r.timestamp / 1000
                            self._counts[prefix] += 1
                            self._last[prefix] = now
        consumer.close()


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout_s:.0f} s")


class _Feed:
    """Sends a workload's transactions to a topic and times their decisions."""

    def __init__(self, bootstrap: str, topic: str, work: Workload, watcher: _Watcher,
                 leg: str) -> None:  # fmt: skip
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
        self.topic, self.work, self.watcher, self.leg = topic, work, watcher, leg
        #: The input topic stamps LogAppendTime (the job legs): each record's metadata
        #: then carries the broker's append time.
        self.log_append_time = leg.startswith("job")

    def close(self) -> None:
        self.producer.close(timeout=5)

    def warm(self, n: int, alive: Callable[[], bool], timeout_s: float = 300) -> None:
        for e in self.work.take(n, "w"):
            self.producer.send(self.topic, json.dumps(e).encode())
        self.producer.flush()

        def done() -> bool:
            if not alive():
                raise TimeoutError(f"{self.leg}: the system under test exited")
            return self.watcher.count("w") >= n

        _wait(done, timeout_s, f"{self.leg}: warm-up")

    def drain(self, n: int, prefix: str, cpu: _Cpu | None = None,
              timeout_s: float = 600) -> tuple[float, float, list[dict[str, Any]]]:  # fmt: skip
        """Send ``n`` at once; (drain rate, seconds, the events)."""
        events = self.work.take(n, prefix)
        payloads = [json.dumps(e).encode() for e in events]
        if cpu:
            cpu.start()
        t0 = time.time()
        for p in payloads:
            self.producer.send(self.topic, p)
        self.producer.flush()
        _wait(lambda: self.watcher.count(prefix) >= n, timeout_s, f"{self.leg}: backlog")
        if cpu:
            cpu.stop()
        wall = self.watcher.last(prefix) - t0
        return n / wall, wall, events

    def paced(self, rate: float, seconds: float) -> tuple[dict[str, float], dict[str, float]]:
        """Send at ``rate`` for ``seconds``; (send times, the broker's append times) by
        ``tx_id``. The second is empty unless the topic stamps LogAppendTime."""
        events = self.work.take(max(1, int(rate * seconds)), "p")
        payloads = [json.dumps(e).encode() for e in events]
        sent: dict[str, float] = {}
        futures = []
        schedule = pacing_schedule(len(events), rate, time.time() + 0.1)
        for at, e, p in zip(schedule, events, payloads, strict=True):
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            sent[e["tx_id"]] = time.time()
            futures.append((e["tx_id"], self.producer.send(self.topic, p)))
        self.producer.flush()
        appended: dict[str, float] = {}
        for tx, fut in futures:
            meta = fut.get(timeout=30)
            if meta.timestamp is not None and meta.timestamp > 0 and self.log_append_time:
                appended[tx] = meta.timestamp / 1000
        return sent, appended


#: A paced run's rate: fixed, a function of the leg's measured max QPS, or none.
Pacing = float | Callable[[float], float] | None


def _backlog_size(probe_rate: float, options: AgentsOptions, seconds: float) -> int:
    return int(min(options.max_events, max(options.probe, probe_rate * seconds)))


def _measure(leg: str, bootstrap: str, topics: tuple[str, str], work: Workload,
             options: AgentsOptions, seconds: float, paced: Pacing, probe: bool = True,
             alive: Callable[[], bool] = lambda: True) -> LegResult:  # fmt: skip
    """Warm-up, probe, backlog of ``seconds`` at the probed rate, and optionally a paced run
    (at ``paced``, or at ``paced(max QPS)``)."""
    with RssSampler() as rss, _Watcher(bootstrap, topics[1]) as written, \
            _Watcher(bootstrap, topics[1], "read_committed") as visible:  # fmt: skip
        feed = _Feed(bootstrap, topics[0], work, written, leg)
        try:
            feed.warm(options.warmup, alive)
            guess = feed.drain(options.probe, "q")[0] if probe else options.probe / seconds
            # Sized from the probe; a backlog that drained in under ``seconds`` (the probe
            # runs cold and underestimates) is followed by one sized from its own rate.
            size, attempt = _backlog_size(guess * 1.5, options, seconds), 0
            while True:
                cpu = _Cpu()
                rate, wall, events = feed.drain(size, f"b{attempt}", cpu)
                if wall >= seconds or size >= options.max_events or attempt >= 2:
                    break
                size, attempt = _backlog_size(rate * 1.15, options, seconds), attempt + 1
            result = LegResult(leg, work.kind, GUARANTEES.get(leg, GUARANTEES["job"]), rate,
                               len(events), wall, written.count(f"b{attempt}"),
                               cpu.total() * 1000 / len(events),
                               {k: v * 1000 / len(events) for k, v in sorted(cpu.by.items())},
                               0.0, extra={"probe_qps": guess, "backlogs": attempt + 1,
                                           "workload_repeats": repeat_stats(events)})  # fmt: skip
            paced_rate = paced(rate) if callable(paced) else paced
            if paced_rate is not None:
                sent, appended = feed.paced(paced_rate, options.paced_seconds)
                with contextlib.suppress(TimeoutError):
                    _wait(lambda: visible.count("p") >= len(sent), 60, f"{leg}: paced")
                lat, _ = event_latencies_ms(sent, written.written_snapshot())
                polled, _ = event_latencies_ms(sent, written.snapshot())
                vis, _ = event_latencies_ms(sent, visible.snapshot())
                result.paced_rate, result.sent, result.received = paced_rate, len(sent), len(lat)
                result.p50_ms, result.p99_ms = percentiles(lat)
                # The same events timed by the watcher's poll, as this bench did before.
                result.extra["p50_p99_ms_at_poll"] = percentiles(polled)
                if appended:
                    # From the broker's append of the input to the sink's send: the system
                    # under test alone, without the load generator's own client delays.
                    from_broker, _ = event_latencies_ms(appended, written.written_snapshot())
                    result.extra["p50_p99_ms_broker_append_to_sink"] = percentiles(from_broker)
                result.extra["paced_p99_ms_by_second"] = _p99_by_second(
                    sent, written.written_snapshot()
                )
                result.visible_received = len(vis)
                result.visible_p50_ms, result.visible_p99_ms = percentiles(vis)
        finally:
            feed.close()
    result.peak_rss_mb = rss.peak_mb
    return result


def _p99_by_second(sent: dict[str, float], arrived: dict[str, float]) -> list[float | None]:
    """p99 latency to the sink write of the events sent in each second of a paced run:
    whether the tail comes in bursts (a checkpoint every few seconds) or evenly."""
    if not sent:
        return []
    start = min(sent.values())
    buckets: dict[int, list[float]] = {}
    for tx, at in sent.items():
        if tx in arrived:
            buckets.setdefault(int(at - start), []).append((arrived[tx] - at) * 1000)
    return [percentiles(buckets.get(i, []))[1] for i in range(max(buckets, default=-1) + 1)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def run_services(bootstrap: str, work: Workload, models: Path | None, accounts: Path | None,
                 options: AgentsOptions, legs: Sequence[str],
                 progress: Callable[[str], None]) -> dict[str, LegResult]:  # fmt: skip
    """Three aiohttp services, then each client against them (a process each).

    ``services``: the serial client; ``services-concurrent``: the asyncio client at each
    of :data:`INFLIGHT`, the best reported (the others in its ``extra``).
    """
    import httpx

    from flinkai.agents.models import RiskModels
    from flinkai.kafka.admin import create_topics

    threshold = RiskModels(models).fraud.info.threshold
    extra = [*(["--models", str(models)] if models else []),
             *(["--accounts", str(accounts)] if accounts else [])]  # fmt: skip
    module = [sys.executable, "-m", "flinkai_bench.agent_services"]
    ports = [_free_port() for _ in range(3)]
    services = [subprocess.Popen([*module, name, "--port", str(port), *extra])
                for name, port in zip(("fraud", "credit", "limit"), ports, strict=True)]  # fmt: skip

    def healthy() -> bool:
        try:
            return all(httpx.get(f"http://127.0.0.1:{p}/health").status_code == 200
                       for p in ports)  # fmt: skip
        except httpx.HTTPError:
            return False

    out: dict[str, LegResult] = {}
    try:
        _wait(healthy, 120, "services did not start")

        def client(leg: str, inflight: int, seconds: float, probe: bool) -> LegResult:
            run = uuid.uuid4().hex[:8]
            topics = (f"agents-svc-in-{run}", f"agents-svc-out-{run}")
            create_topics(bootstrap, topics)
            proc = subprocess.Popen([*module, "client", "--bootstrap", bootstrap,
                                     "--source", topics[0], "--sink", topics[1],
                                     "--ports", ",".join(map(str, ports)),
                                     "--fraud-threshold", repr(threshold),
                                     "--inflight", str(inflight)])  # fmt: skip
            try:
                return _measure(leg, bootstrap, topics, work, options, seconds, None, probe)
            finally:
                _stop([proc])

        if "services" in legs:
            out["services"] = client("services", 0, options.seconds_at_max, True)
            progress(f"services: max {out['services'].max_qps:.0f}/s")
        if "services-concurrent" in legs:
            tried: dict[int, LegResult] = {}
            for inflight in INFLIGHT:
                tried[inflight] = client("services-concurrent", inflight,
                                         options.concurrent_seconds, True)  # fmt: skip
                progress(f"services-concurrent x{inflight}: {tried[inflight].max_qps:.0f}/s")
            best = max(tried, key=lambda k: tried[k].max_qps)
            result = tried[best]
            result.extra["inflight"] = best
            result.extra["max_qps_by_inflight"] = {str(k): v.max_qps for k, v in tried.items()}
            out["services-concurrent"] = result
    finally:
        _stop(services)
    return out


def run_job(bootstrap: str, work: Workload, models: Path | None, accounts: Path | None,
            options: AgentsOptions, leg: str, paced: Pacing) -> LegResult:  # fmt: skip
    """``jobs/risk_decisions.sql`` on the MiniCluster, unbounded, exactly-once (its default).

    A ``leg`` of :data:`JOB_VARIANTS` runs the same script with that operator named
    in the ``APPLY OPERATOR`` statement and those settings added; ``job-distinct`` is
    the real job (on the distinct workload).
    """
    import tempfile

    from flinkai.kafka.admin import create_topics
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise FileNotFoundError("jobs/risk_decisions.sql: run from a source checkout")
    script = root / "jobs" / "risk_decisions.sql"
    if leg in JOB_VARIANTS:
        operator, settings = JOB_VARIANTS[leg]
        if settings.get("python.execution-mode") == "thread":
            settings = {**settings, "python.pythonpath": _embedded_pythonpath()}
        script = _with_operator(script, operator, settings)
    run = uuid.uuid4().hex[:8]
    topics = (f"agents-job-in-{run}", f"agents-job-out-{run}")
    dlq = f"agents-job-dlq-{run}"
    create_topics(bootstrap, [topics[0]], configs={"message.timestamp.type": "LogAppendTime"})
    create_topics(bootstrap, [topics[1], dlq])
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap, "TRANSACTIONS_TOPIC": topics[0],
        "DECISIONS_TOPIC": topics[1], "DLQ_TOPIC": dlq, "GROUP_ID": f"agents-{run}",
        "SCAN_BOUNDED_MODE": "unbounded",
        "RISK_MODELS": str(models or ""), "RISK_ACCOUNTS": str(accounts or ""),
    }  # fmt: skip
    # A process of its own (``flinkai run``): on a MiniCluster PyFlink runs the Python
    # worker in loopback mode, inside the client process; run here, it would share this
    # process's interpreter and GIL with the bench's producer and consumers.
    command = [str(Path(sys.executable).parent / "flinkai"), "run", str(script)]
    for name, value in variables.items():
        command += ["--var", f"{name}={value}"]
    with tempfile.NamedTemporaryFile(prefix=f"flinkai-bench-{leg}-", suffix=".log",
                                     delete=False) as log:  # fmt: skip
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            return _measure(leg, bootstrap, topics, work, options, options.seconds_at_max,
                            paced, alive=lambda: proc.poll() is None)  # fmt: skip
        except TimeoutError as e:
            tail = Path(log.name).read_text(encoding="utf-8", errors="replace")[-3000:]
            raise TimeoutError(f"{e}; job log {log.name}:\n{tail}") from e
        finally:
            _end_job(proc)


def _end_job(proc: subprocess.Popen[bytes]) -> None:
    """Interrupt ``flinkai run`` (it cancels the job), then end its process group (the
    MiniCluster's JVM is in it)."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _embedded_pythonpath() -> str:
    """``sys.path`` for Python embedded in the JVM (thread mode): this interpreter's
    site-packages and flinkai's source folder. The embedded interpreter starts from the
    system's library and does not see the virtualenv (``No module named 'pemja'``)."""
    import sysconfig

    import flinkai

    return os.pathsep.join(
        [sysconfig.get_paths()["purelib"], str(Path(flinkai.__file__).parents[1])]
    )


def _with_operator(script: Path, operator: str, settings: dict[str, str]) -> Path:
    """A copy of ``script`` (in a temporary folder) naming ``operator``, plus ``settings``."""
    import tempfile

    text = script.read_text(encoding="utf-8")
    if text.count(f"'{_OPERATOR}'") != 1:
        raise ValueError(f"{script}: expected one APPLY OPERATOR '{_OPERATOR}'")
    text = text.replace(f"'{_OPERATOR}'", f"'{operator}'")
    # A setting the script SETs itself is changed in place (a later SET would win);
    # others go first: an operator reads some (the execution mode) when it is built.
    first = []
    for key, value in settings.items():
        pattern = re.compile(rf"^SET '{re.escape(key)}' = '[^']*';$", re.MULTILINE)
        text, found = pattern.subn(f"SET '{key}' = '{value}';", text)
        if not found:
            first.append(f"SET '{key}' = '{value}';\n")
    text = "".join(first) + text
    folder = Path(tempfile.mkdtemp(prefix="flinkai-agents-floor-"))
    copy = folder / script.name
    copy.write_text(text, encoding="utf-8")
    return copy


def step_costs(pool: Sequence[dict[str, Any]], models: Path | None, accounts: Path | None,
               n: int = 400) -> dict[str, float]:  # fmt: skip
    """Microseconds per event of the operator's Python steps, in this process, no Flink.

    ``parse``: validating the raw bytes; ``window``: rebuilding the spend window from
    its snapshot, reading it and writing the new snapshot; ``graph``: one LangGraph
    invoke (Pregel) with both models; ``plan``: the same graph run by the plan runtime
    (:class:`~flinkai.agents.plan.GraphPlan`, the operator's default); ``nodes``: the
    same node functions called in order by hand (what the plan adds is ``plan - nodes``,
    what Pregel adds ``graph - nodes``); ``pickle``: the snapshot through pickle both
    ways, as the state backend stores it.
    """
    import pickle

    from flinkai.agents.data import load_accounts
    from flinkai.agents.graph import RiskGraph, after_credit, after_fraud, decide_node, limit_node
    from flinkai.agents.models import RiskModels
    from flinkai.agents.transactions import Transaction, parse_transaction
    from flinkai.agents.window import SpendWindow

    graph = RiskGraph.from_models(RiskModels(models), runtime="langgraph")
    table = load_accounts(accounts)
    raws = [json.dumps({**pool[i % len(pool)], "tx_id": f"s-{i}"}).encode() for i in range(n)]
    txs = [t for t in map(parse_transaction, raws) if isinstance(t, Transaction)]
    snap = SpendWindow().add(0, 1.0).add(1, 2.0).snapshot()

    def timed(fn: Callable[[Any], Any], items: Sequence[Any]) -> float:
        for item in items[:50]:  # warm-up: first calls are slower
            fn(item)
        t0 = time.perf_counter()
        for item in items:
            fn(item)
        return (time.perf_counter() - t0) * 1e6 / len(items)

    def window(tx: Any) -> None:
        w = SpendWindow.from_snapshot(snap)
        w.spend(tx.ts_ms)
        w.add(tx.ts_ms, tx.amount).snapshot()

    def state(tx: Any) -> Any:
        a = table.get(tx.account_id)
        return {"tx_id": tx.tx_id, "account_id": tx.account_id, "ts_ms": tx.ts_ms,
                "amount": tx.amount, "features": tuple(tx.features),
                "credit_limit": None if a is None else a.credit_limit,
                "credit_features": None if a is None else a.features,
                "spend_24h": 0.0, "reasons": [], "path": []}  # fmt: skip

    def nodes(tx: Any) -> None:
        s: Any = state(tx)
        s = {**s, **graph.fraud_node(s)}
        if after_fraud(s) == "credit":
            s = {**s, **graph.credit_node(s)}
            if after_credit(s) == "limit":
                s = {**s, **limit_node(s)}
        decide_node(s)

    return {
        "parse_us": timed(parse_transaction, raws),
        "window_us": timed(window, txs),
        "pickle_us": timed(lambda _: pickle.loads(pickle.dumps(snap)), txs),
        "graph_us": timed(lambda tx: graph.compiled.invoke(state(tx)), txs),
        "plan_us": timed(lambda tx: graph.plan.invoke(state(tx)), txs),
        "nodes_us": timed(nodes, txs),
    }


#: The design's figures (§3.3): the job's and the serial services' max QPS, the job's p99.
DESIGN = {"job_qps": 3850.0, "job_p99_ms": 87.0, "services_qps": 1200.0, "services_p99_ms": 210.0}


def identical_to_operator(work: Workload, models: Path | None, accounts: Path | None,
                          bundle: int) -> dict[str, Any]:  # fmt: skip
    """The whole fraud file once (this workload's accounts) through the per-event operator
    function and through :func:`process_bundle` in bundles of ``bundle``: same rows, same
    final state?"""
    from flinkai.agents.data import load_accounts
    from flinkai.agents.graph import RiskGraph
    from flinkai.agents.models import RiskModels
    from flinkai.operators.agents import process_bundle, process_transaction

    graph = RiskGraph.from_models(RiskModels(models))
    table = load_accounts(accounts)
    copy = Workload(work.pool, work.accounts, work.kind, exponent=work.exponent)
    rows = _raw_rows(copy.take(len(work.pool), "i"))
    want: list[tuple[Any, ...]] = []
    states: dict[str, Any] = {}
    for row in rows:
        out, snap = process_transaction(states.get(row[0]), row, graph, table)
        if snap is not None:
            states[row[0]] = snap
        want.append(out)
    got: list[tuple[Any, ...]] = []
    bundled: dict[str, Any] = {}
    for at in range(0, len(rows), bundle):
        got.extend(process_bundle(rows[at : at + bundle], bundled.get, bundled.__setitem__,
                                  graph, table))  # fmt: skip
    return {"rows": len(rows), "bundle": bundle, "identical": got == want and bundled == states,
            "approved": sum(1 for r in want if r[4])}  # fmt: skip


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's summary object (Zipf workload) from a run's legs."""
    legs = result["legs"]

    def get(leg: str, key: str) -> Any:
        return legs.get(leg, {}).get(key)

    return {
        "job_max_qps": get("job", "max_qps"),
        "floor_max_qps": get("job-fixed", "max_qps"),
        "services_serial_max_qps": get("services", "max_qps"),
        "services_concurrent_max_qps": get("services-concurrent", "max_qps"),
        "job_p99_ms_at_quarter": get("job", "p99_ms"),
        "floor_p99_ms_at_quarter": get("job-fixed", "p99_ms"),
        "job_p99_visible_ms_at_quarter": get("job", "visible_p99_ms"),
        "checkpoint_interval_ms": result["checkpoint_interval_ms"],
        "identical_to_operator": result.get("identity", {}).get("identical"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def targets(s: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, judged on :func:`summary`; ``None``: not measured."""
    job, floor = s["job_max_qps"], s["floor_max_qps"]
    serial, conc = s["services_serial_max_qps"], s["services_concurrent_max_qps"]
    p99, floor_p99 = s["job_p99_ms_at_quarter"], s["floor_p99_ms_at_quarter"]
    ratios = {
        "job_over_floor": _ratio(job, floor),
        "job_over_services_serial": _ratio(job, serial),
        "job_over_services_concurrent": _ratio(job, conc),
        "job_p99_over_floor_p99": _ratio(p99, floor_p99),
        "floor_over_design_qps": _ratio(floor, DESIGN["job_qps"]),
    }

    def judged(value: float | None, ok: Callable[[float], bool]) -> bool | None:
        return None if value is None else ok(value)

    return {
        "ratios": ratios,
        "met": {
            "job_ge_0.8x_floor": judged(ratios["job_over_floor"], lambda r: r >= 0.8),
            "job_ge_3x_services_serial": judged(
                ratios["job_over_services_serial"], lambda r: r >= 3.0
            ),
            "job_ge_2x_services_concurrent": judged(
                ratios["job_over_services_concurrent"], lambda r: r >= 2.0
            ),
            "job_p99_le_87ms": judged(p99, lambda v: v <= 87.0),
            "job_p99_le_1.2x_floor_p99": judged(
                ratios["job_p99_over_floor_p99"], lambda r: r <= 1.2
            ),
            "identical_to_operator": s["identical_to_operator"],
        },
    }


def run_agents(
    options: AgentsOptions,
    models: Path | None = None,
    accounts: Path | None = None,
    bootstrap: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the legs; the result as JSON-ready data (workload, legs, summary, targets)."""
    from flinkai.agents.data import (
        CREDIT_FEATURES,
        FRAUD_FEATURES,
        default_credit_file,
        default_fraud_file,
        load_accounts,
        read_table,
        transaction_events,
    )
    from flinkai.config import load_config

    fraud = read_table(default_fraud_file(), (*FRAUD_FEATURES, "Time"))
    clients = read_table(accounts or default_credit_file(), ("ID", *CREDIT_FEATURES))
    pool = list(transaction_events(fraud, clients))
    ids = sorted(load_accounts(accounts))
    zipf, distinct = Workload(pool, ids, "zipf"), Workload(pool, ids, "distinct")
    legs: dict[str, LegResult] = {}
    out: dict[str, Any] = {
        "options": asdict(options),
        "cores": os.cpu_count(),
        # Other work on the machine skews every leg: the 1-minute load before and after.
        "loadavg_1m_before": os.getloadavg()[0],
        "checkpoint_interval_ms": load_config().runtime.checkpoint_interval_ms,
        "workloads": {"zipf": zipf.describe(), "distinct": distinct.describe()},
        "guarantees": {leg: GUARANTEES.get(leg, GUARANTEES["job"]) for leg in options.legs},
    }
    if any(leg in ("raw", "raw-vectorised", "job") for leg in options.legs):
        progress("identity: bundles vs the per-event operator on the whole fraud file")
        out["identity"] = identical_to_operator(zipf, models, accounts, options.bundle)
        progress(f"identity: {out['identity']}")
    with broker(bootstrap) as servers:
        for leg in ("raw", "raw-vectorised"):
            if leg in options.legs:
                legs[leg] = run_raw(zipf, models, accounts, options, leg, options.probe * 4)
                progress(f"{leg}: max {legs[leg].max_qps:.0f}/s")
        wanted = [leg for leg in ("services", "services-concurrent") if leg in options.legs]
        if wanted:
            legs.update(run_services(servers, zipf, models, accounts, options, wanted, progress))
        quarter = options.rate
        jobs = [x for x in options.legs if x in ("job", "job-distinct") or x in JOB_VARIANTS]
        for leg in jobs:
            paced: Pacing = options.rate  # --rate: every job leg at that rate
            if leg == "job":  # a quarter of its own max, unless --rate
                paced = quarter if quarter is not None else (lambda qps: qps / 4)
            elif leg == "job-fixed":  # at the job's rate
                paced = (
                    quarter
                    if quarter is not None
                    else (legs["job"].paced_rate if "job" in legs else (lambda qps: qps / 4))
                )
            work = distinct if leg == "job-distinct" else zipf
            r = run_job(servers, work, models, accounts, options,
                        "job" if leg == "job-distinct" else leg, paced)  # fmt: skip
            r.leg = leg
            legs[leg] = r
            progress(f"{leg}: max {r.max_qps:.0f}/s, p50/p99 at {r.paced_rate} /s: "
                     f"{r.p50_ms} / {r.p99_ms} ms (visible {r.visible_p99_ms})")  # fmt: skip
    out["loadavg_1m_after"] = os.getloadavg()[0]
    out["legs"] = {k: asdict(v) for k, v in legs.items()}
    out["design"] = DESIGN
    out["summary"] = summary(out)
    out["targets"] = targets(out["summary"])
    if any(leg in FLOOR_LEGS[:-1] for leg in legs):
        out["step_costs_us"] = step_costs(pool, models, accounts)
    return out


def format_table(result: dict[str, Any]) -> str:
    """A readable table of the legs, then the summary and targets."""

    def f(v: Any, spec: str = ".1f") -> str:
        return "n/a" if v is None else format(v, spec)

    lines = [f"{'leg':<20} {'work':<8} {'max QPS':>8} {'paced/s':>8} {'p50 ms':>7} "
             f"{'p99 ms':>7} {'vis p99':>8} {'CPU ms/dec':>10} {'RSS MB':>7}"]  # fmt: skip
    for r in result["legs"].values():
        lines.append(f"{r['leg']:<20} {r['workload']:<8} {r['max_qps']:>8.1f} "
                     f"{f(r['paced_rate']):>8} {f(r['p50_ms']):>7} {f(r['p99_ms']):>7} "
                     f"{f(r['visible_p99_ms']):>8} {r['cpu_ms_per_decision']:>10.2f} "
                     f"{r['peak_rss_mb']:>7.0f}")  # fmt: skip
    lines.append(f"summary: {json.dumps(result['summary'])}")
    lines.append(f"targets: {json.dumps(result['targets'])}")
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    legs = tuple(args.legs.split(",")) if args.legs else (
        ("services", *FLOOR_LEGS) if args.floor else LEGS)  # fmt: skip
    options = AgentsOptions(
        seconds_at_max=args.seconds or (8.0 if args.quick else 30.0),
        probe=300 if args.quick else 1500,
        paced_seconds=args.paced_seconds or (5.0 if args.quick else 15.0),
        concurrent_seconds=3.0 if args.quick else 8.0,
        legs=legs,
        rate=args.rate,
        bundle=args.bundle,
    )  # fmt: skip
    if options.rate is not None and options.rate <= 0:
        print(f"bench agents: --rate must be > 0, got {options.rate}")
        return 2
    known = (*LEGS, *JOB_VARIANTS)
    unknown = [leg for leg in options.legs if leg not in known]
    if unknown:
        print(f"bench agents: unknown leg(s) {unknown}; expected {list(known)}")
        return 2
    result = run_agents(
        options,
        Path(args.models) if args.models else None,
        Path(args.accounts) if args.accounts else None,
        args.bootstrap,
        progress=lambda line: print(line, flush=True),
    )
    print(format_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def register(subparsers: Any) -> None:
    """Add ``flinkai bench agents``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "agents",
        help="risk decision graph: Flink job vs its floor, HTTP services and plain loops",
        description="Max QPS (a backlog of >= 30 s drained), latency at a quarter of the "
        "job's max (to the sink write and to read_committed visibility), CPU ms per "
        "decision by process and peak RSS of jobs/risk_decisions.sql (exactly-once), its "
        "parse-plus-fixed-decision floor, three aiohttp agent services (serial client, "
        "and an async client at 1/4/16/64 in flight) and the operator's functions in a "
        "plain loop (per event and vectorised), on a Zipf workload (exponent 1.0 over the "
        "30,000 accounts) and an all-distinct one. Needs the models (flinkai model "
        "train-risk).",
    )
    parser.add_argument("--quick", action="store_true", help="8 s backlogs, 5 s paced")
    parser.add_argument("--seconds", type=float, help="backlog length at max rate (30)")
    parser.add_argument("--legs", help=f"comma-separated subset of {','.join(LEGS)} and the "
                        f"job variants {','.join(JOB_VARIANTS)}")  # fmt: skip
    parser.add_argument("--floor", action="store_true",
                        help="the older decomposition of the job: the services, the job "
                        "with a fixed-decision operator (Python and JVM keying), + keyed "
                        "state, the real operator (Python and JVM keying, langgraph and plan "
                        "runtimes); plus in-process step costs")  # fmt: skip
    parser.add_argument("--rate", type=float, metavar="EVENTS_PER_S",
                        help="pace the latency runs at this rate instead of a quarter of "
                        "the job's max")  # fmt: skip
    parser.add_argument("--paced-seconds", type=float, help="paced run length (15)")
    parser.add_argument(
        "--bundle", type=int, default=100, help="transactions per bundle in raw-vectorised (100)"
    )
    parser.add_argument("--models", metavar="DIR", help="risk model folder")
    parser.add_argument("--accounts", metavar="CSV", help="account table")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.set_defaults(handler=_handle)


def _suite_rows(size: int | None) -> list[dict[str, Any]]:
    options = AgentsOptions(seconds_at_max=8.0, probe=size or 300, paced_seconds=5.0,
                            concurrent_seconds=3.0)  # fmt: skip
    return list(run_agents(options)["legs"].values())


suite_entry = SuiteEntry(
    name="agents",
    description="Risk decision graph per transaction: Flink job vs its floor, HTTP services "
    "and loops.",
    sizes={"quick": 300, "default": 1500, "full": 3000},
    run=_suite_rows,
    chart=("leg", "max_qps"),
)
