"""The job row, the bursts and the memory workload of ``flinkai bench llm-serve``.

The job row runs ``jobs/llm_complete.sql`` on the local MiniCluster with token deltas
on a topic: a delta's producer timestamp (set when the scheduler step that made it
ended) gives TTFT, ITL and the time a completion was produced; the time the bench's
consumer received the first delta gives ``ttft_at_consumer_ms``, the wait a reader of
the deltas topic sees. Completions become visible at a ``read_committed`` consumer when
their checkpoint commits, later.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flinkai_bench.llm_serve_rows import Item, Record, Row
from flinkai_bench.shared.rss import process_kind, tree_usage

REPO = Path(__file__).resolve().parents[2]

__all__ = ["JobRow", "bursts", "memory_workload"]


class JobRow(Row):
    """``jobs/llm_complete.sql``, unbounded, default checkpoints, deltas on a topic."""

    name = "job"

    def __init__(self, bootstrap: str, config: Any, args: Any) -> None:
        from kafka import KafkaConsumer, KafkaProducer

        from flinkai.kafka.admin import create_topics
        from flinkai.local.process import free_port
        from flinkai.runtime.cluster import FlinkRest
        from flinkai.runtime.runner import RunOptions, run_script
        from flinkai_bench.shared.rss import RssSampler

        run = uuid.uuid4().hex[:8]
        self.topics = [f"llm-bench-{t}-{run}" for t in ("prompts", "out", "dlq", "deltas")]
        create_topics(bootstrap, self.topics)
        port = free_port()
        self.config = config.with_overrides(
            llm={"deltas_topic": self.topics[3]},
            kafka={"bootstrap_servers": bootstrap},
            runtime={"flink_conf": {**config.runtime.flink_conf, "rest.port": str(port),
                                    "rest.address": "127.0.0.1",
                                    "rest.bind-address": "127.0.0.1",
                                    # every checkpoint of a 10-minute burst, not the last 10
                                    "web.checkpoints.history": "10000"}},
        )  # fmt: skip
        self.api = FlinkRest(f"127.0.0.1:{port}")
        self.new_tokens = int(config.llm.max_new_tokens)
        self.rss = RssSampler().__enter__()
        self.result = run_script(
            REPO / "jobs" / "llm_complete.sql",
            self.config,
            RunOptions(
                variables={
                    "KAFKA_BOOTSTRAP": bootstrap,
                    "PROMPTS_TOPIC": self.topics[0],
                    "COMPLETIONS_TOPIC": self.topics[1],
                    "DLQ_TOPIC": self.topics[2],
                    "GROUP_ID": f"g-{run}",
                    "SCAN_BOUNDED_MODE": "unbounded",
                },
                wait=False,
            ),
        )
        assert self.result.job_id, "the job did not start"
        self.job_id: str = self.result.job_id
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1)
        self.records: dict[str, Record] = {}
        self.seen: dict[str, dict[int, list[int]]] = {}
        self.visible: dict[str, float] = {}
        self._offset = time.monotonic() - time.time()  # epoch -> monotonic
        self._stop = threading.Event()
        self._consumers = [
            KafkaConsumer(self.topics[3], bootstrap_servers=bootstrap,
                          auto_offset_reset="earliest", enable_auto_commit=False),
            KafkaConsumer(self.topics[1], bootstrap_servers=bootstrap,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          isolation_level="read_committed"),
        ]  # fmt: skip
        self._thread = threading.Thread(target=self._consume, daemon=True)
        self._thread.start()
        self._warm_up()

    def _warm_up(self) -> None:
        """Two prompts through the job, so its start (model load) is in no figure."""
        records = {}
        for i in range(2):
            key = f"warm-{i}"
            records[key] = self.records[key] = Record(key, time.monotonic())
            self.producer.send(self.topics[0], json.dumps({"id": key, "prompt": "Hi"}).encode())
        self.producer.flush()
        self.drain(records, timeout_s=300)
        for key in records:
            del self.records[key]

    def _consume(self) -> None:
        deltas, out = self._consumers
        while not self._stop.is_set():
            for batch in deltas.poll(timeout_ms=100).values():
                for m in batch:
                    self._delta(json.loads(m.value), m.timestamp / 1000 + self._offset)
            now = time.monotonic()
            for batch in out.poll(timeout_ms=0).values():
                for m in batch:
                    self.visible.setdefault(json.loads(m.value)["id"], now)

    def _delta(self, d: dict[str, Any], at: float) -> None:
        key = str(d["id"])
        parts = self.seen.setdefault(key, {})
        seq = int(d["seq"])
        if seq in parts:
            return  # a replayed delta: the first copy counts
        parts[seq] = [int(t) for t in d["token_ids"]]
        r = self.records.get(key)
        if r is None:
            return
        if seq == 0:
            r.first, r.first_seen = at, time.monotonic()
        r.token_times.append(at)
        if d.get("finished"):
            r.done = at
            r.tokens = tuple(t for s in sorted(parts) for t in parts[s])

    def submit(self, key: str, item: Item, record: Record) -> None:
        self.records[key] = record
        self.producer.send(self.topics[0], json.dumps({"id": key, "prompt": item.text}).encode())
        self.producer.flush()

    def drain(self, records: dict[str, Record], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(r.done is None for r in records.values()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def identity(
        self, model: Any, pool: Sequence[Item], log: Callable[[str], None]
    ) -> dict[str, Any]:
        """Every finished job completion against single-sequence greedy (near-ties reported)."""
        return check_identity(model, pool, self.records.values(), self.new_tokens, log)

    @property
    def peak_rss_mb(self) -> float:
        return round(self.rss.peak_bytes / 2**20, 1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self._consumers:
            c.close()
        self.producer.close()
        client = self.result.job_client
        if client is not None:
            with contextlib.suppress(Exception):
                client.cancel().result()
        self.rss.__exit__(None, None, None)


_REFERENCES: dict[str, tuple[tuple[int, ...], float]] = {}


def check_identity(
    model: Any, pool: Sequence[Item], records: Any, new_tokens: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Tokens of each finished record against greedy of its pool item (cached per item)."""
    from flinkai.llm.compare import first_divergence, greedy_with_margins

    by_key = {i.key: i for i in pool}
    n = equal = 0
    flips = []
    for r in records:
        if r.done is None or not r.tokens or r.key.split("-")[0] not in by_key:
            continue
        item = by_key[r.key.split("-")[0]]
        if item.key not in _REFERENCES:
            _REFERENCES[item.key] = greedy_with_margins(
                model.decoder, item.ids, new_tokens, model.stop_ids
            )
        want = _REFERENCES[item.key][0]
        n += 1
        if tuple(r.tokens) == want:
            equal += 1
            continue
        d = first_divergence(model.decoder, item.ids, want, r.tokens)
        flips.append({"key": r.key, "position": d.position if d else None,
                      "margin": d.margin if d else None, "near_tie": bool(d and d.near_tie)})  # fmt: skip
    identical = all(f["near_tie"] for f in flips)
    log(f"identity: {equal} of {n} equal; {len(flips)} differ "
        f"({sum(f['near_tie'] for f in flips)} near-ties below 1e-4)")  # fmt: skip
    return {"compared": n, "equal": equal, "flips": flips, "identical": identical}


def bursts(
    job: JobRow, model: Any, pool: Sequence[Item], sizes: Sequence[int],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:  # fmt: skip
    """Bursts sent at once to the running job; checkpoints read from its REST API."""
    out = []
    for size in sizes:
        restarts_before = job.api.restarts(job.job_id)
        records: dict[str, Record] = {}
        start_epoch = time.time() * 1000
        start = time.monotonic()
        tag = uuid.uuid4().hex[:4]
        for i in range(size):
            item = pool[i % len(pool)]
            key = f"{item.key}-b{tag}-{i}"
            records[key] = Record(key, time.monotonic())
            job.records[key] = records[key]
            job.producer.send(job.topics[0], json.dumps({"id": key, "prompt": item.text}).encode())
        job.producer.flush()
        job.drain(records, timeout_s=1800)
        drain_s = max(r.done or 0 for r in records.values()) - start
        end_epoch = time.time() * 1000
        # One more checkpoint interval so the checkpoints of the burst are in the history.
        time.sleep(job.config.runtime.checkpoint_interval_ms / 1000 + 1)
        history = job.api.checkpoints(job.job_id).get("history") or []
        during = [c for c in history
                  if start_epoch <= int(c.get("trigger_timestamp") or 0) <= end_epoch]  # fmt: skip
        tokens = sum(len(r.tokens) for r in records.values())
        identity = check_identity(model, pool, records.values(), job.new_tokens, log)
        row = {
            "prompts": size,
            "finished": sum(1 for r in records.values() if r.done is not None),
            "drain_s": round(drain_s, 1),
            "tok_s": round(tokens / drain_s, 1) if drain_s > 0 else None,
            "checkpoints": len(during),
            # None, not 0, when no checkpoint fell in the burst: nothing was measured.
            "checkpoint_max_ms": max((int(c.get("end_to_end_duration") or 0) for c in during),
                                     default=None),
            "checkpoints_failed": sum(1 for c in during if c.get("status") == "FAILED"),
            "restarts": job.api.restarts(job.job_id) - restarts_before,
            "identical": identity["identical"] and identity["compared"] == size,
            "flips": identity["flips"],
        }  # fmt: skip
        log(f"burst {size}: drained in {row['drain_s']} s, {row['tok_s']} tok/s, "
            f"{row['checkpoints']} checkpoints (longest {row['checkpoint_max_ms']} ms), "
            f"restarts {row['restarts']}, identical {row['identical']}")  # fmt: skip
        out.append(row)
    return out


def _memory_run(conn: Any, encoded: str, texts: list[list[str]], bootstrap: str,
                think_s: float | None) -> None:  # fmt: skip
    """One memory variant in a fresh process (its RSS is its own).

    ``think_s`` None: every turn is queued at once (a session's turns still run in
    order). Else a session's next turn comes ``think_s`` after its previous one
    finished, as a user reads the answer and types; the sessions start spread over
    one think time.
    """
    from flinkai.functions.llm import build_store, load_prompt_model
    from flinkai.functions.llm_service import CompletionService, Pending
    from flinkai.runtime.environment import decode_config

    config = decode_config(encoded)  # a Config holds mappingproxies, which do not pickle
    from flinkai_bench.shared.rss import RssSampler

    model = load_prompt_model(config)
    base_rss = RssSampler()
    base_rss.sample()
    store = build_store(config)
    service = CompletionService(config, model, store)
    service.start()
    sessions = len(texts)
    total = sum(len(t) for t in texts)
    due = [0.0 if think_s is None else s * think_s / sessions for s in range(sessions)]
    turn = [0] * sessions
    busy = [False] * sessions
    ttft: list[float] = []
    e2e: list[float] = []
    cached = 0
    started = time.monotonic()
    cpu0 = time.process_time()
    n = done = 0
    with RssSampler() as rss:
        while done < total:
            now = time.monotonic() - started
            for s in range(sessions):
                while turn[s] < len(texts[s]) and not busy[s] and now >= due[s]:
                    n += 1
                    payload = json.dumps(
                        {"id": f"s{s}t{turn[s]}", "prompt": texts[s][turn[s]], "session": f"s{s}"}
                    )
                    pending = service.accept(payload.encode(), 0, n)
                    assert isinstance(pending, Pending), pending
                    assert service.hold(pending) is None
                    turn[s] += 1
                    busy[s] = think_s is not None
            for o in service.finished():
                assert o.row[10] is None, o.row
                ttft.append(o.row[5])
                e2e.append(o.row[7])
                cached += o.row[4]
                s = int(str(o.row[0])[1:].split("t")[0])
                busy[s] = False
                due[s] = time.monotonic() - started + (think_s or 0.0)
                done += 1
            time.sleep(0.01)
    seconds = time.monotonic() - started
    cpu_s = time.process_time() - cpu0
    stats = service.scheduler.stats
    prefix = service.scheduler.prefix
    prefix_hits = prefix.stats.hits if prefix is not None else 0
    service.close()

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1)

    conn.send({
        "seconds": round(seconds, 2),
        "tokens": stats.generated_tokens,
        "tok_s": round(stats.generated_tokens / seconds, 1),
        "ttft_ms": {"p50": pct(ttft, 50), "p99": pct(ttft, 99)},
        "e2e_ms": {"p50": pct(e2e, 50), "p99": pct(e2e, 99)},
        "cached_prompt_tokens": cached,
        "peak_kv_bytes": stats.peak_kv_bytes,
        "peak_rss_mb": round(rss.peak_bytes / 2**20, 1),
        "base_rss_mb": round(base_rss.peak_bytes / 2**20, 1),
        "preemptions": stats.preemptions,
        "session_offloads": stats.session_offloads,
        "store_wait_ms": round(stats.store_wait_ms, 1),
        "prefix_hits": prefix_hits,
        "worker_cpu_s": round(cpu_s, 1),
    })  # fmt: skip
    conn.close()


def _broker_ticks() -> int:
    """CPU ticks of the local broker this bench started (0: none, e.g. ``--bootstrap``)."""
    _, ticks = tree_usage(os.getpid())
    return sum(t for pid, t in ticks.items() if process_kind(pid) == "kafka broker")


def memory_workload(bootstrap: str, config: Any, model: Any, pool: Sequence[Item], args: Any,
                    log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """Multi-turn sessions: every session's KV resident, then a budget with Kafka offload.

    Two arrival patterns: **paced** (a think time between a turn's answer and the
    session's next turn: the sessions a budget can offload are the idle ones; the
    figures the summary reports) and **closed** (every turn queued at once: no session
    is idle for long, so the budget shrinks the batch instead). Paced also runs with
    the store's decoded cache cut (``--small-cache-mb``: offloaded KV then leaves the
    process, restores read Kafka) and, as a control, with the budget and an in-process
    store (no broker sharing the cores).
    """
    followups = ["Say it in other words.", "Why does it matter?", "Who is involved?",
                 "What happens next?", "Give it a headline."]  # fmt: skip
    texts = [[pool[s % len(pool)].text, *followups[: args.turns - 1]] for s in range(args.sessions)]
    ctx = multiprocessing.get_context("spawn")
    from flinkai.runtime.environment import encode_config

    def run(cfg: Any, think_s: float | None) -> dict[str, Any]:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_memory_run, args=(child, encode_config(cfg), texts, bootstrap, think_s)
        )
        before = _broker_ticks()
        proc.start()
        result = parent.recv()
        proc.join(60)
        # The broker shares the cores with the worker here: what the store costs it.
        used = _broker_ticks() - before
        result["broker_cpu_s"] = round(used / os.sysconf("SC_CLK_TCK"), 1) if before else None
        return result

    def row(workload: str, variant: str, r: dict[str, Any], base: dict[str, Any] | None,
            cache_mb: float | None) -> dict[str, Any]:  # fmt: skip
        out = {
            "workload": workload, "variant": variant, "cache_mb": cache_mb,
            "seconds": r["seconds"], "tok_s": r["tok_s"],
            "ttft_p50_ms": r["ttft_ms"]["p50"], "ttft_p99_ms": r["ttft_ms"]["p99"],
            "e2e_p50_ms": r["e2e_ms"]["p50"], "peak_kv_mb": round(r["peak_kv_bytes"] / 2**20, 1),
            "peak_rss_mb": r["peak_rss_mb"], "offloads": r["session_offloads"],
            "store_wait_ms": r["store_wait_ms"],
            "worker_cpu_s": r["worker_cpu_s"], "broker_cpu_s": r["broker_cpu_s"],
        }  # fmt: skip
        if base is not None:
            out["kv_ratio"] = round(r["peak_kv_bytes"] / base["peak_kv_bytes"], 3)
            out["tok_s_ratio"] = round(r["tok_s"] / base["tok_s"], 3)
            out["rss_ratio"] = round(r["peak_rss_mb"] / base["peak_rss_mb"], 3)
        return out

    def offload_config(budget: int, cache_mb: float | None) -> Any:
        llm: dict[str, Any] = {"kv_budget_bytes": budget, "store": "kafka",
                               "topic": f"llm-bench-kv-{uuid.uuid4().hex[:6]}"}  # fmt: skip
        if cache_mb is not None:
            llm["cache_max_bytes"] = int(cache_mb * 2**20)
        return config.with_overrides(llm=llm, kafka={"bootstrap_servers": bootstrap})

    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"sessions": args.sessions, "turns": args.turns, "runs": rows}
    default_mb = round(config.llm.cache_max_bytes / 2**20, 1)
    for workload, think_s in ((f"paced, {args.think_s:g} s think", args.think_s),
                              ("closed", None)):  # fmt: skip
        resident = run(config.with_overrides(llm={"kv_budget_bytes": 0, "store": "none"}), think_s)
        log(f"memory {workload}, all resident: {resident}")
        rows.append(row(workload, "all resident", resident, None, None))
        budget = int(resident["peak_kv_bytes"] * args.budget_fraction)
        offload = run(offload_config(budget, None), think_s)
        log(f"memory {workload}, budget {budget} with Kafka offload: {offload}")
        offload_row = row(workload, "budget + offload", offload, resident, default_mb)
        rows.append(offload_row)
        ratios = {k: offload_row[k] for k in ("kv_ratio", "tok_s_ratio", "rss_ratio")}
        if think_s is None:
            out["closed"] = {"budget_bytes": budget, **ratios}
            continue
        # the summary's figures
        out |= {"think_s": think_s, "budget_bytes": budget, "resident": resident,
                "offload": offload, **ratios}  # fmt: skip
        if args.small_cache_mb:
            small = run(offload_config(budget, args.small_cache_mb), think_s)
            log(f"memory {workload}, budget {budget}, store cache {args.small_cache_mb:g} MiB: "
                f"{small}")  # fmt: skip
            rows.append(row(workload, "budget + offload", small, resident, args.small_cache_mb))
        # The control: the same budget with the store in this process (no memory saved,
        # no broker on the cores): what the budget's scheduling alone costs.
        control = run(config.with_overrides(llm={"kv_budget_bytes": budget, "store": "memory"}),
                      think_s)  # fmt: skip
        log(f"memory {workload}, budget {budget}, in-process store: {control}")
        rows.append(row(workload, "budget + in-process store", control, resident, None))
    return out
