"""``flinkai bench agents``: the risk decision graph three ways, on the same transactions.

* ``job``: ``jobs/risk_decisions.sql`` on the local MiniCluster (Kafka in and out); the
  operator runs the graph in its default runtime, the plan
  (:class:`~flinkai.agents.plan.GraphPlan`);
* ``services``: the three agents as aiohttp services on loopback, called in series per
  transaction by a plain Kafka consumer (:mod:`flinkai_bench.agent_services`);
* ``raw``: the same LangGraph graph in a plain Python loop (no Kafka, no Flink), run by
  LangGraph's own compiled ``invoke``.

``--floor`` adds variants of the job leg (:data:`JOB_VARIANTS`), among them
``job-langgraph``: the real operator with ``'runtime' = 'langgraph'``.

Each leg: a warm-up (answered in full before timing), then a burst of ``events``
transactions sent at once, whose drain rate is the leg's max QPS; then a paced run
at half that rate for ``seconds``, whose per-transaction latency (send to decision
seen on the output topic; for ``raw``, scheduled time to decision) gives P50/P99.
CPU ms per decision: CPU time of the leg's process tree (broker excluded) over the
burst, divided by the decisions. Peak RSS: the leg's process tree.

The job leg runs with ``at-least-once`` delivery: with exactly-once, a decision
becomes visible only when the next checkpoint commits, so its latency is the
checkpoint interval, not the graph's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flinkai_bench.embed.stats import event_latencies_ms, pacing_schedule, percentiles
from flinkai_bench.shared.broker import broker
from flinkai_bench.shared.rss import RssSampler, process_kind, tree_usage
from flinkai_bench.shared.suite import SuiteEntry

__all__ = [
    "FLOOR_LEGS",
    "JOB_VARIANTS",
    "AgentsOptions",
    "LegResult",
    "register",
    "run_agents",
    "step_costs",
    "suite_entry",
]

LEGS = ("raw", "services", "job")
#: Variants of the job leg: ``jobs/risk_decisions.sql`` with another operator named, or
#: settings added. ``job-fixed``: a fixed decision (parse only); ``job-state``: + the
#: keyed ValueState read and write; the real operator is ``job``
#: (:mod:`flinkai_bench.agents_floor`). ``*-pykey``: keyed by PyFlink's ``key_by`` (a
#: Python key selector), the wiring before the key moved to the JVM. ``job-thread``: the
#: real operator in PyFlink's thread mode (Python embedded in the TaskManager's JVM; no
#: Python worker, no bundles, no gRPC state requests); measured slower here, not in
#: ``--floor``. ``job-langgraph``: the real operator with ``'runtime' = 'langgraph'``,
#: the graph run by LangGraph's Pregel invoke instead of the default plan runtime (what
#: that loop costs inside the job). The other real-operator legs run the default runtime.
JOB_VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "job-fixed-pykey": ("flinkai_bench.agents_floor.fixed_python_key", {}),
    "job-fixed": ("flinkai_bench.agents_floor.fixed", {}),
    "job-state": ("flinkai_bench.agents_floor.state_only", {}),
    "job-pykey": ("flinkai_bench.agents_floor.decide_python_key", {}),
    "job-thread": ("flinkai.operators.agents.decide", {"python.execution-mode": "thread"}),
    "job-langgraph": ("flinkai_bench.agents_floor.decide_langgraph", {}),
}
FLOOR_LEGS = ("job-fixed-pykey", "job-fixed", "job-state", "job-pykey", "job-langgraph", "job")
_OPERATOR = "flinkai.operators.agents.decide"


@dataclass(frozen=True)
class AgentsOptions:
    """Sizes of one run.

    Attributes:
        events: Transactions in the burst (max QPS).
        seconds: Length of the paced run at half the max rate.
        warmup: Transactions answered before timing starts.
        legs: Which legs to run.
        rate: Pace every leg at this rate (events/s) instead of half its own max, so
            the legs' latencies are compared at one load.
    """

    events: int = 1500
    seconds: float = 20.0
    warmup: int = 50
    legs: tuple[str, ...] = LEGS
    rate: float | None = None


@dataclass
class LegResult:
    """One leg's figures."""

    leg: str
    max_qps: float
    paced_rate: float
    sent: int
    received: int
    p50_ms: float | None
    p99_ms: float | None
    cpu_ms_per_decision: float
    peak_rss_mb: float


def _events(n: int, prefix: str, pool: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**pool[i % len(pool)], "tx_id": f"{prefix}-{i}"} for i in range(n)]


def _cpu_s(exclude_broker: bool = True) -> float:
    _, ticks = tree_usage(os.getpid())
    hz = os.sysconf("SC_CLK_TCK")
    return sum(t for pid, t in ticks.items()
               if not (exclude_broker and process_kind(pid) == "kafka broker")) / hz  # fmt: skip


# -- raw loop -----------------------------------------------------------------------------


def run_raw(pool: Sequence[dict[str, Any]], models: Path | None, accounts: Path | None,
            options: AgentsOptions) -> LegResult:  # fmt: skip
    """The graph in a plain loop, with per-account state in a dict.

    The issue defines this leg as the same LangGraph graph in a plain loop, so it runs
    LangGraph's own compiled ``invoke`` (``runtime="langgraph"``), not the plan runtime
    the job uses by default.
    """
    import base64

    from flinkai.agents.data import load_accounts
    from flinkai.agents.graph import RiskGraph
    from flinkai.agents.models import RiskModels
    from flinkai.operators.agents import process_transaction

    with RssSampler() as rss:
        graph = RiskGraph.from_models(RiskModels(models), runtime="langgraph")
        table = load_accounts(accounts)
        states: dict[str, Any] = {}

        def one(e: dict[str, Any]) -> None:
            row = (e["account_id"], base64.b64encode(json.dumps(e).encode()).decode(), 0, 0)
            _, snap = process_transaction(states.get(e["account_id"]), row, graph, table)
            if snap is not None:
                states[e["account_id"]] = snap

        for e in _events(options.warmup, "w", pool):
            one(e)
        burst = _events(options.events, "b", pool)
        cpu0, t0 = time.process_time(), time.perf_counter()
        for e in burst:
            one(e)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        max_qps = len(burst) / wall
        rate = options.rate or max_qps / 2
        paced = _events(max(1, int(rate * options.seconds)), "p", pool)
        start = time.time() + 0.05
        latencies = []
        for at, e in zip(pacing_schedule(len(paced), rate, start), paced, strict=True):
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            one(e)
            latencies.append((time.time() - at) * 1000)
    p50, p99 = percentiles(latencies)
    return LegResult("raw", max_qps, rate, len(paced), len(latencies), p50, p99,
                     cpu * 1000 / len(burst), rss.peak_mb)  # fmt: skip


# -- Kafka legs -----------------------------------------------------------------------------


class _Watcher:
    """Consumes an output topic in a thread; notes when each ``tx_id`` first shows up."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.arrived: dict[str, float] = {}
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
            return sum(1 for k in self.arrived if k.startswith(prefix))

    def last(self, prefix: str) -> float:
        with self._lock:
            return max(v for k, v in self.arrived.items() if k.startswith(prefix))

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.arrived)

    def _run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 enable_auto_commit=False, fetch_max_wait_ms=5)  # fmt: skip
        part = TopicPartition(self.topic, 0)
        consumer.assign([part])
        consumer.seek_to_beginning(part)
        self._ready.set()
        while not self._stop.is_set():
            for records in consumer.poll(timeout_ms=50).values():
                now = time.time()
                for r in records:
                    key = str(json.loads(r.value or b"{}").get("tx_id"))
                    with self._lock:
                        self.arrived.setdefault(key, now)
        consumer.close()


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout_s:.0f} s")


def _kafka_leg(leg: str, bootstrap: str, topics: tuple[str, str], pool: Sequence[dict[str, Any]],
               options: AgentsOptions, start: Callable[[], Any], stop: Callable[[Any], None],
               timeout_s: float) -> LegResult:  # fmt: skip
    """Warm-up, burst and paced run through Kafka against a system ``start`` brings up."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)

    def send(events: list[dict[str, Any]]) -> None:
        for e in events:
            producer.send(topics[0], json.dumps(e).encode())
        producer.flush()

    with RssSampler() as rss, _Watcher(bootstrap, topics[1]) as watcher:
        handle = start()
        try:
            send(_events(options.warmup, "w", pool))
            _wait(lambda: watcher.count("w-") >= options.warmup, timeout_s, f"{leg}: warm-up")
            burst = _events(options.events, "b", pool)
            cpu0, t0 = _cpu_s(), time.time()
            send(burst)
            _wait(lambda: watcher.count("b-") >= len(burst), timeout_s, f"{leg}: burst")
            cpu = _cpu_s() - cpu0
            max_qps = len(burst) / (watcher.last("b-") - t0)
            rate = options.rate or max_qps / 2
            paced = _events(max(1, int(rate * options.seconds)), "p", pool)
            sent: dict[str, float] = {}
            for at, e in zip(pacing_schedule(len(paced), rate, time.time() + 0.1), paced,
                             strict=True):  # fmt: skip
                delay = at - time.time()
                if delay > 0:
                    time.sleep(delay)
                sent[e["tx_id"]] = time.time()
                producer.send(topics[0], json.dumps(e).encode())
            producer.flush()
            # Missing decisions are reported as sent - received.
            with contextlib.suppress(TimeoutError):
                _wait(lambda: watcher.count("p-") >= len(paced), 60, f"{leg}: paced")
            arrived = watcher.snapshot()
        finally:
            stop(handle)
            producer.close(timeout=5)
    latencies, _ = event_latencies_ms(sent, arrived)
    p50, p99 = percentiles(latencies)
    return LegResult(leg, max_qps, rate, len(sent), len(latencies), p50, p99,
                     cpu * 1000 / len(burst), rss.peak_mb)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_services(bootstrap: str, pool: Sequence[dict[str, Any]], models: Path | None,
                 accounts: Path | None, options: AgentsOptions) -> LegResult:  # fmt: skip
    """Three aiohttp services plus a serial Kafka client, each its own process."""
    from flinkai.agents.models import RiskModels
    from flinkai.kafka.admin import create_topics

    run = uuid.uuid4().hex[:8]
    topics = (f"agents-svc-in-{run}", f"agents-svc-out-{run}")
    create_topics(bootstrap, topics)
    threshold = RiskModels(models).fraud.info.threshold
    extra = [*(["--models", str(models)] if models else []),
             *(["--accounts", str(accounts)] if accounts else [])]  # fmt: skip
    module = [sys.executable, "-m", "flinkai_bench.agent_services"]

    def start() -> list[subprocess.Popen[bytes]]:
        import httpx

        ports = [_free_port() for _ in range(3)]
        procs = [subprocess.Popen([*module, name, "--port", str(port), *extra])
                 for name, port in zip(("fraud", "credit", "limit"), ports, strict=True)]  # fmt: skip

        def healthy() -> bool:
            try:
                return all(httpx.get(f"http://127.0.0.1:{p}/health").status_code == 200
                           for p in ports)  # fmt: skip
            except httpx.HTTPError:
                return False

        _wait(healthy, 120, "services did not start")
        procs.append(subprocess.Popen([*module, "client", "--bootstrap", bootstrap,
                                       "--source", topics[0], "--sink", topics[1],
                                       "--ports", ",".join(map(str, ports)),
                                       "--fraud-threshold", repr(threshold)]))  # fmt: skip
        return procs

    def stop(procs: list[subprocess.Popen[bytes]]) -> None:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    return _kafka_leg("services", bootstrap, topics, pool, options, start, stop, 600)


def run_job(bootstrap: str, pool: Sequence[dict[str, Any]], models: Path | None,
            accounts: Path | None, options: AgentsOptions, leg: str = "job") -> LegResult:  # fmt: skip
    """``jobs/risk_decisions.sql`` on the MiniCluster, unbounded, at-least-once.

    A ``leg`` of :data:`JOB_VARIANTS` runs the same script with that operator named
    in the ``APPLY OPERATOR`` statement and those settings added.
    """
    from flinkai.config import load_config
    from flinkai.kafka.admin import create_topics
    from flinkai.paths import repo_root
    from flinkai.runtime.runner import RunOptions, default_udf_dirs, run_script

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
    create_topics(bootstrap, [*topics, dlq])
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap, "TRANSACTIONS_TOPIC": topics[0],
        "DECISIONS_TOPIC": topics[1], "DLQ_TOPIC": dlq, "GROUP_ID": f"agents-{run}",
        "SCAN_BOUNDED_MODE": "unbounded", "DELIVERY_GUARANTEE": "at-least-once",
        "RISK_MODELS": str(models or ""), "RISK_ACCOUNTS": str(accounts or ""),
    }  # fmt: skip

    def start() -> Any:
        return run_script(script, load_config(),
                          RunOptions(variables=variables, wait=False,
                                     udf_dirs=default_udf_dirs(root / "jobs" / "x.sql")))  # fmt: skip

    def stop(result: Any) -> None:
        client = getattr(result, "job_client", None)
        if client is not None:
            # Py4J error: a job that already ended cannot be cancelled.
            with contextlib.suppress(Exception):
                client.cancel().result()

    return _kafka_leg(leg, bootstrap, topics, pool, options, start, stop, 600)


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
    # Settings go first: an operator reads some (the execution mode) when it is built.
    text = "".join(f"SET '{k}' = '{v}';\n" for k, v in settings.items()) + text
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
    raws = [json.dumps(e).encode() for e in _events(n, "s", pool)]
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


def run_agents(
    options: AgentsOptions,
    models: Path | None = None,
    accounts: Path | None = None,
    bootstrap: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the legs; the result as JSON-ready data (legs, ratios, targets)."""
    from flinkai.agents.data import (
        CREDIT_FEATURES,
        FRAUD_FEATURES,
        default_credit_file,
        default_fraud_file,
        read_table,
        transaction_events,
    )

    fraud = read_table(default_fraud_file(), (*FRAUD_FEATURES, "Time"))
    clients = read_table(accounts or default_credit_file(), ("ID", *CREDIT_FEATURES))
    pool = list(transaction_events(fraud, clients))
    legs: dict[str, LegResult] = {}
    with broker(bootstrap) as servers:
        for leg in options.legs:
            progress(f"{leg}: running")
            if leg == "raw":
                legs[leg] = run_raw(pool, models, accounts, options)
            elif leg == "services":
                legs[leg] = run_services(servers, pool, models, accounts, options)
            elif leg == "job" or leg in JOB_VARIANTS:
                legs[leg] = run_job(servers, pool, models, accounts, options, leg)
            r = legs[leg]
            progress(f"{leg}: max {r.max_qps:.0f}/s, p50/p99 at {r.paced_rate:.0f}/s "
                     f"{r.p50_ms} / {r.p99_ms} ms")  # fmt: skip
    out: dict[str, Any] = {
        "options": asdict(options),
        "legs": {k: asdict(v) for k, v in legs.items()},
    }
    if any(leg in JOB_VARIANTS for leg in legs):
        # Wall ms per decision at the drain rate, each step against the one before.
        out["floor_ms_per_decision"] = {k: 1000.0 / v.max_qps for k, v in legs.items()}
        out["step_costs_us"] = step_costs(pool, models, accounts)
    if "job" in legs and "services" in legs:
        ratio = legs["job"].max_qps / legs["services"].max_qps
        out["job_over_services_max_qps"] = ratio
        p99 = legs["job"].p99_ms
        out["targets"] = {
            # The target is the p99 at half the job's own max rate; not judged at --rate.
            "job_p99_le_87ms": None if options.rate else (p99 is not None and p99 <= 87.0),
            "job_max_qps_ge_3x_services": ratio >= 3.0,
        }
    return out


def format_table(result: dict[str, Any]) -> str:
    """A readable table of the legs."""
    lines = [f"{'leg':<9} {'max QPS':>8} {'paced/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
             f"{'CPU ms/dec':>10} {'peak RSS MB':>11} {'recv/sent':>10}"]  # fmt: skip
    for r in result["legs"].values():
        p50 = "n/a" if r["p50_ms"] is None else f"{r['p50_ms']:.1f}"
        p99 = "n/a" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
        lines.append(f"{r['leg']:<9} {r['max_qps']:>8.1f} {r['paced_rate']:>8.1f} {p50:>8} "
                     f"{p99:>8} {r['cpu_ms_per_decision']:>10.2f} {r['peak_rss_mb']:>11.0f} "
                     f"{r['received']:>5}/{r['sent']:<4}")  # fmt: skip
    if "floor_ms_per_decision" in result:
        lines.append("wall ms per decision at max rate: " + ", ".join(
            f"{k} {v:.2f}" for k, v in result["floor_ms_per_decision"].items()))  # fmt: skip
        lines.append("in-process us per event: " + ", ".join(
            f"{k} {v:.0f}" for k, v in result["step_costs_us"].items()))  # fmt: skip
    if "job_over_services_max_qps" in result:
        lines.append(f"job / services max QPS: {result['job_over_services_max_qps']:.2f}x "
                     f"(target >= 3x); targets: {result['targets']}")  # fmt: skip
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    options = AgentsOptions(
        events=args.events or (400 if args.quick else 1500),
        seconds=args.seconds or (8.0 if args.quick else 20.0),
        legs=tuple(args.legs.split(",")) if args.legs else (
            ("services", *FLOOR_LEGS) if args.floor else LEGS),
        rate=args.rate,
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
        help="risk decision graph: Flink job vs serial HTTP microservices vs plain loop",
        description="Max QPS, P50/P99 at half of it, CPU ms per decision and peak RSS of "
        "jobs/risk_decisions.sql, of three aiohttp agent services called in series by a "
        "Kafka consumer, and of the LangGraph graph in a plain loop. Needs the models "
        "(flinkai model train-risk).",
    )
    parser.add_argument("--quick", action="store_true", help="400 events, 8 s paced")
    parser.add_argument("--events", type=int, help="burst size for max QPS (1500)")
    parser.add_argument("--seconds", type=float, help="paced run length (20)")
    parser.add_argument("--legs", help=f"comma-separated subset of {','.join(LEGS)} and the "
                        f"job variants {','.join(JOB_VARIANTS)}")  # fmt: skip
    parser.add_argument("--floor", action="store_true",
                        help="where the job's time goes: the services, then the job with a "
                        "fixed-decision operator (Python and JVM keying), + keyed state, the "
                        "real operator (Python and JVM keying), the real operator with "
                        "'runtime' = 'langgraph' (LangGraph's Pregel invoke) and with its "
                        "default plan runtime; plus in-process step costs")  # fmt: skip
    parser.add_argument("--rate", type=float, metavar="EVENTS_PER_S",
                        help="pace every leg at this rate instead of half its own max rate "
                        "(latencies compared at one load)")  # fmt: skip
    parser.add_argument("--models", metavar="DIR", help="risk model folder")
    parser.add_argument("--accounts", metavar="CSV", help="account table")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.set_defaults(handler=_handle)


def _suite_rows(size: int | None) -> list[dict[str, Any]]:
    result = run_agents(AgentsOptions(events=size or 400, seconds=8.0))
    return list(result["legs"].values())


suite_entry = SuiteEntry(
    name="agents",
    description="Risk decision graph per transaction: Flink job vs serial HTTP services vs loop.",
    sizes={"quick": 300, "default": 1500, "full": 3000},
    run=_suite_rows,
    chart=("leg", "max_qps"),
)
