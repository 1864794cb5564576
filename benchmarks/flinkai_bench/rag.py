"""``flinkai bench rag``: freshness of the live index against micro-batch reindexing.

Two ways to keep a retrieval index over AG News articles current, measured in one run
on the same documents, the same arrival rate, the same model and the same Chroma
server:

``stream``
    The product path. Articles are produced to Kafka at ``--rate`` documents per
    second; ``jobs/rag_ingest.sql`` runs on the embedded Flink MiniCluster and writes
    each one to the Chroma collection (chunk, embed, version-guarded upsert).
    *Freshness* of a document is the time from its ``send`` to the first moment a
    query with its own vector returns it (a probe polls sampled documents every
    50 ms, so it includes the Flink bundle wait, the model, the write and Chroma's
    indexing, plus up to one poll interval).

``micro-batch`` (the default baseline)
    What a user would build without the job: a Kafka consumer on the same topic that,
    every 1, 5 or 10 s (``--intervals``), embeds the documents changed since its last
    run and upserts them with the job's own indexing code into a collection of the
    same kind on the same Chroma server (``flinkai_bench.rag_microbatch``). The
    documents are split evenly over the intervals; each share is streamed once and
    indexed by the job and by one reindexer *at the same time*, so the pair shares
    the broker, the cluster, the machine and the probe. Its freshness is timed by the
    same probe, to visibility in a query, from the same ``send``.

``rebuild`` (``--baseline rebuild``)
    The older full rebuild: every ``--batch-interval`` seconds it re-embeds and
    reloads *all* documents that have arrived so far into a fresh collection, after
    the stream phase and without its load; freshness is to the end of the rebuild
    that holds a document. Kept for comparison with earlier figures.

Also reported: query latency p50/p99 (the probe's queries against the live index
while ingest runs; against the last batch collection for the baseline), ingest
throughput (documents written / time from the first send to the last document
stored), peak RSS per process (this process, which also runs the Python UDF workers
as threads; the Flink JVM; the Kafka broker; the Chroma server), and recall@10 of
the live HNSW index against exact brute force over the very vectors it stores.

Benchmarks measure and report; they never assert on timings.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.config import Config, load_config
from flinkai_bench.shared.devices import DeviceReport, SystemProbe, gpu_status
from flinkai_bench.shared.suite import SuiteEntry

__all__ = ["PROFILES", "RagBenchOptions", "register", "run_rag_bench", "suite_entry"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RagBenchOptions:
    """One run's parameters.

    Attributes:
        docs: AG News articles streamed (from the start of the file).
        rate: Arrival rate, documents per second.
        baseline: ``microbatch`` (the default: incremental reindex runs beside the
            stream, one interval per share of the documents) or ``rebuild`` (every
            document re-embedded into a fresh collection, after the stream phase).
        intervals_s: The micro-batch periods; the documents are split evenly.
        batch_interval_s: The rebuild baseline's period.
        sample_every: Freshness is probed on every n-th document.
        queries: Held-out articles used as recall@10 queries.
        k: Recall depth.
        timeout_s: Bound on each wait (job start, catching up, a probe).
    """

    docs: int = 3000
    rate: float = 50.0
    baseline: str = "microbatch"
    intervals_s: tuple[float, ...] = (1.0, 5.0, 10.0)
    batch_interval_s: float = 10.0
    sample_every: int = 10
    queries: int = 300
    k: int = 10
    timeout_s: float = 300.0


PROFILES: dict[str, RagBenchOptions] = {
    "quick": RagBenchOptions(docs=600, rate=20.0, queries=200),
    "default": RagBenchOptions(),
}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values), q))


# -- peak RSS per process ---------------------------------------------------------------


class ProcessRss:
    """Peak RSS per kind of process under this one (Flink JVM, Kafka, Chroma, this)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.peak_mb: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval_s

    @staticmethod
    def _kind(pid: int, cmd: str) -> str:
        if pid == os.getpid():
            return "bench + Python UDF workers (this process)"
        if "kafka.Kafka" in cmd:
            return "Kafka broker"
        if "chroma" in cmd:
            return "Chroma server"
        if "java" in cmd:
            return "Flink MiniCluster JVM"
        return "other children"

    def sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        parents: dict[int, int] = {}
        rss: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * page
        totals: dict[str, int] = {}
        me = os.getpid()
        for pid in rss:
            p = pid
            while p in parents and p != me and p > 1:
                p = parents[p]
            if p != me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            kind = self._kind(pid, cmd)
            totals[kind] = totals.get(kind, 0) + rss[pid]
        for kind, total in totals.items():
            self.peak_mb[kind] = max(self.peak_mb.get(kind, 0.0), total / 2**20)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def __enter__(self) -> ProcessRss:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- results ------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    """Freshness, query latency and throughput of one way of keeping the index."""

    name: str
    path: str
    docs: int
    rate: float
    fresh_s: list[float] = field(default_factory=list)
    missing: int = 0
    query_ms: list[float] = field(default_factory=list)
    throughput_docs_s: float | None = None
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pairs: list[_Pair] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {
            "index": self.name,
            "path": self.path,
            "docs": self.docs,
            "rate_docs_s": self.rate,
            "freshness_p50_s": _pct(self.fresh_s, 50),
            "freshness_p99_s": _pct(self.fresh_s, 99),
            "freshness_max_s": max(self.fresh_s) if self.fresh_s else None,
            "probed": len(self.fresh_s),
            "never_queryable": self.missing,
            "query_p50_ms": _pct(self.query_ms, 50),
            "query_p99_ms": _pct(self.query_ms, 99),
            "ingest_docs_s": self.throughput_docs_s,
            "peak_rss_mb": self.peak_rss_mb,
        }


def _articles(n: int) -> list[str]:
    from flinkai.datasets import load_ag_news

    return [text for _, text in load_ag_news(limit=n)]


def _embed(config: Config, texts: list[str]) -> np.ndarray:
    from flinkai.functions.embedding import EmbeddingFunction

    fn = EmbeddingFunction(config)
    fn.open()
    try:
        out = []
        for i in range(0, len(texts), 256):
            result = fn(texts[i : i + 256])
            if any(e is not None for e in result.errors):
                raise RuntimeError(f"embedding failed: {result.errors}")
            out += [np.asarray(v, dtype=np.float32) for v in result.embeddings]
        return np.stack(out)
    finally:
        fn.close()


def _doc_record(doc_id: str, text: str) -> bytes:
    ms = int(time.time() * 1000)
    return json.dumps({"doc_id": doc_id, "text": text, "updated_at": ms}).encode()


# -- the stream phase ---------------------------------------------------------------------


class _Probe:
    """Polls the live index for sampled documents until a query with their vector finds them."""

    def __init__(self, index: Any, interval_s: float = 0.05) -> None:
        self.index = index
        self.interval_s = interval_s
        self.pending: dict[str, tuple[float, np.ndarray]] = {}
        self.fresh_s: dict[str, float] = {}
        self.seen_at: dict[str, float] = {}
        self.query_ms: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, doc_id: str, sent_at: float, vector: np.ndarray) -> None:
        with self._lock:
            self.pending[doc_id] = (sent_at, vector)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                items = list(self.pending.items())
            for doc_id, (sent_at, vector) in items:
                started = time.perf_counter()
                hits = self.index.query(vector, 3)
                self.query_ms.append((time.perf_counter() - started) * 1000)
                if any(h.doc_id == doc_id for h in hits):
                    seen = time.time()
                    self.seen_at[doc_id] = seen
                    self.fresh_s[doc_id] = seen - sent_at
                    with self._lock:
                        self.pending.pop(doc_id, None)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# -- the micro-batch baseline, paired with the stream -------------------------------------


def _segments(n: int, opts: RagBenchOptions) -> list[tuple[int, int, float | None]]:
    """Document ranges [lo, hi) and the micro-batch interval that runs beside each.

    With the micro-batch baseline the documents are split evenly over its intervals;
    each range is streamed once, indexed by the job and by that interval's reindexer
    at the same time, so the pair shares one load. Otherwise one range, no baseline.
    """
    if opts.baseline != "microbatch" or not opts.intervals_s:
        return [(0, n, None)]
    k = len(opts.intervals_s)
    if n < k:
        raise ValueError(f"{n} documents cannot be split over {k} micro-batch intervals")
    bounds = [round(j * n / k) for j in range(k + 1)]
    return [(bounds[j], bounds[j + 1], opts.intervals_s[j]) for j in range(k)]


def _chunks(texts: list[str], lo: int, hi: int, config: Config) -> int:
    from flinkai.rag.chunking import chunk_document

    return sum(len(chunk_document(f"ag-{i}", texts[i], config.rag)) for i in range(lo, hi))


def _holds_chunks(index: Any, n: int) -> bool:
    return bool(index.count() >= n)


def _wait_time(predicate: Callable[[], bool], timeout_s: float) -> float | None:
    """When ``predicate`` first held (polled every 0.1 s), or None after ``timeout_s``."""
    return time.time() if _wait(predicate, timeout_s, 0.1) else None


@dataclass
class _Segment:
    lo: int
    hi: int
    interval_s: float | None
    first_send: float
    sent_at: dict[str, float] = field(default_factory=dict)
    stored_at: float | None = None

    def rate(self, done: float | None) -> float | None:
        return (self.hi - self.lo) / (done - self.first_send) if done else None


@dataclass
class _Pair:
    """The stream and one micro-batch interval over the same documents, at the same time."""

    segment: _Segment
    stream: PhaseResult
    baseline: PhaseResult

    def fill_stream(self, probe: _Probe) -> None:
        from flinkai_bench.rag_microbatch import visibility

        fresh, unseen = visibility(self.segment.sent_at, probe.seen_at)
        self.stream.fresh_s, self.stream.missing = fresh, len(unseen)

    def ratio_p99(self) -> float | None:
        a, b = _pct(self.stream.fresh_s, 99), _pct(self.baseline.fresh_s, 99)
        return b / a if a and b else None


class _MicroBatchLeg:
    """A micro-batch reindexer on its own collection of the same server, and its probe."""

    def __init__(
        self,
        config: Config,
        bootstrap: str,
        topic: str,
        interval_s: float,
        vectors: dict[int, np.ndarray],
    ) -> None:
        from flinkai.rag.chroma import ChromaIndex
        from flinkai_bench.rag_microbatch import MicroBatchReindexer

        name = f"{config.rag.collection}-mb-{round(interval_s * 1000)}ms"
        self.config = config.with_overrides(rag=asdict(replace(config.rag, collection=name)))
        self.interval_s = interval_s
        self.reindexer = MicroBatchReindexer(self.config, bootstrap, topic, interval_s)
        self.reindexer.start()
        self.probe = _Probe(ChromaIndex(self.config.rag))
        self.probe.start()

    def finish(self, seg: _Segment, opts: RagBenchOptions) -> _Pair:
        from flinkai_bench.rag_microbatch import visibility

        ids = [f"ag-{i}" for i in range(seg.lo, seg.hi)]
        state = self.reindexer.state
        done = _wait_time(lambda: all(d in state.indexed_at for d in ids), opts.timeout_s)
        _wait(lambda: not self.probe.pending, 30.0, 0.2)
        self.probe.stop()
        self.probe.index.close()
        self.reindexer.stop()
        n = seg.hi - seg.lo
        stream = PhaseResult(f"stream beside {self.interval_s:g} s", "rag_ingest.sql", n, opts.rate)
        stream.throughput_docs_s = seg.rate(seg.stored_at)
        base = PhaseResult(
            f"micro-batch {self.interval_s:g} s",
            f"consumer + DocumentIndexer every {self.interval_s:g} s (changed documents only)",
            n,
            opts.rate,
        )
        base.fresh_s, unseen = visibility(seg.sent_at, self.probe.seen_at)
        base.missing = len(unseen)
        base.query_ms = self.probe.query_ms
        base.throughput_docs_s = seg.rate(done)
        runs = state.runs
        docs, busy = sum(r.documents for r in runs), sum(r.ended - r.began for r in runs)
        base.notes.append(
            f"{len(runs)} runs, {docs} documents embedded, "
            f"{sum(r.missed_ticks for r in runs)} ticks missed (a run overran), "
            f"longest run {max((r.ended - r.began for r in runs), default=0.0):.2f} s, "
            f"{docs / busy if busy else 0.0:.1f} documents/s while a run was busy"
        )
        if state.invalid or state.errors:
            base.notes.append(f"{state.invalid} invalid records; errors: {state.errors[:3]}")
        if done is None:
            base.notes.append(f"not all {n} documents indexed within {opts.timeout_s:g} s")
        return _Pair(seg, stream, base)


def _script() -> Path:
    from flinkai.errors import SetupError
    from flinkai.paths import repo_root

    root = repo_root()
    if root is None:
        raise SetupError("the rag bench needs a source checkout (jobs/)")
    return root / "jobs" / "rag_ingest.sql"


def _wait(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def _stream_phase(
    opts: RagBenchOptions,
    config: Config,
    bootstrap: str,
    texts: list[str],
    vectors: dict[int, np.ndarray],
    progress: Callable[[str], None],
) -> PhaseResult:
    from kafka import KafkaProducer

    from flinkai.kafka.admin import create_topics
    from flinkai.rag.chroma import ChromaIndex
    from flinkai.runtime.runner import RunOptions, run_script

    result = PhaseResult(
        "stream", "Kafka -> rag_ingest.sql (Flink MiniCluster) -> Chroma", len(texts), opts.rate
    )
    run_id = uuid.uuid4().hex[:8]
    topics = (f"docs-{run_id}", f"acks-{run_id}", f"dlq-{run_id}")
    create_topics(bootstrap, list(topics))
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "DOCS_TOPIC": topics[0],
        "ACKS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        "GROUP_ID": f"bench-{run_id}",
        "SCAN_BOUNDED_MODE": "unbounded",
    }
    job = run_script(_script(), config, RunOptions(variables=variables, wait=False))
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    index = ChromaIndex(config.rag)
    try:
        # Warm up: the job is running and the model loaded once a document is queryable.
        warm = [f"warm-{i}" for i in range(3)]
        for i, d in enumerate(warm):
            producer.send(topics[0], key=d.encode(), value=_doc_record(d, texts[i]))
        producer.flush()
        progress("stream: waiting for the job to start (warm-up documents)")
        if not _wait(lambda: set(warm) <= set(index.documents()), opts.timeout_s, 1.0):
            raise RuntimeError(f"the ingest job stored no warm-up document in {opts.timeout_s} s")
        base_count = index.count()
        probe = _Probe(ChromaIndex(config.rag))  # its own client: it runs in another thread
        probe.start()
        segments = _segments(len(texts), opts)
        progress(f"stream: {len(texts)} documents at {opts.rate}/s")
        want = base_count
        timed = 0.0  # seconds from each segment's first send to the job storing its last
        for lo, hi, interval in segments:
            baseline = None
            if interval is not None:  # its model loads before the segment's first send
                baseline = _MicroBatchLeg(config, bootstrap, topics[0], interval, vectors)
                progress(f"stream + micro-batch every {interval:g} s: documents {lo}-{hi - 1}")
            seg = _Segment(lo, hi, interval, time.time())
            for i in range(lo, hi):
                due = seg.first_send + (i - lo) / opts.rate
                time.sleep(max(0.0, due - time.time()))
                doc_id = f"ag-{i}"
                sent = time.time()
                producer.send(topics[0], key=doc_id.encode(), value=_doc_record(doc_id, texts[i]))
                if i in vectors:
                    probe.add(doc_id, sent, vectors[i])
                    seg.sent_at[doc_id] = sent
                    if baseline is not None:
                        baseline.probe.add(doc_id, sent, vectors[i])
            producer.flush()
            lag = time.time() - seg.first_send - (hi - lo) / opts.rate
            if lag > 1.0:
                result.notes.append(f"the producer fell {lag:.1f} s behind its schedule")
            want += _chunks(texts, lo, hi, config)
            seg.stored_at = _wait_time(partial(_holds_chunks, index, want), opts.timeout_s)
            timed += (seg.stored_at or time.time()) - seg.first_send
            if baseline is not None:
                result.pairs.append(baseline.finish(seg, opts))
        stored = index.count() >= want
        _wait(lambda: not probe.pending, 30.0, 0.2)
        probe.stop()
        probe.index.close()
        result.fresh_s = list(probe.fresh_s.values())
        result.missing = len(probe.pending)
        result.query_ms = probe.query_ms
        for pair in result.pairs:
            pair.fill_stream(probe)
        count = index.count() - base_count
        result.throughput_docs_s = len(texts) / timed if stored else None
        if not stored:
            result.notes.append(f"only {count} of {want - base_count} chunks stored in time")
    finally:
        producer.close()
        index.close()
        if job.job_client is not None:
            try:
                job.job_client.cancel().result()
            except Exception as e:  # a job that already ended cannot be cancelled
                log.debug("cancel: %s", e)
    return result


# -- the batch baseline -------------------------------------------------------------------


def _batch_phase(
    opts: RagBenchOptions,
    config: Config,
    texts: list[str],
    vectors: dict[int, np.ndarray],
    progress: Callable[[str], None],
) -> PhaseResult:
    from flinkai.functions.embedding import EmbeddingFunction
    from flinkai.rag.chroma import ChromaIndex
    from flinkai.rag.chunking import chunk_document
    from flinkai.rag.index import Chunk, UpsertDocument

    result = PhaseResult(
        "batch",
        f"reload all documents every {opts.batch_interval_s:g} s (re-embed + fresh collection)",
        len(texts),
        opts.rate,
    )
    embed = EmbeddingFunction(config)
    embed.open()
    serving: Any = None
    fresh: dict[int, float] = {}
    rebuilds = 0
    start = time.time()
    try:
        next_at = start + opts.batch_interval_s
        while len(fresh) < len(texts):
            time.sleep(max(0.0, next_at - time.time()))
            began = time.time()
            arrived = min(len(texts), int((began - start) * opts.rate) + 1)
            ops = []
            pieces = [(i, chunk_document(f"ag-{i}", texts[i], config.rag)) for i in range(arrived)]
            flat = [(i, cid, t) for i, chunks in pieces for cid, t in chunks]
            for j in range(0, len(flat), 256):
                part = flat[j : j + 256]
                out = embed([t for _, _, t in part])
                by_doc: dict[int, list[Chunk]] = {}
                for (i, cid, t), v in zip(part, out.embeddings, strict=True):
                    assert v is not None
                    by_doc.setdefault(i, []).append(Chunk(f"ag-{i}", cid, t, v))
                ops += [UpsertDocument(f"ag-{i}", 1, tuple(c)) for i, c in by_doc.items()]
            rag = replace(config.rag, collection=f"{config.rag.collection}-batch-{rebuilds}")
            fresh_index = ChromaIndex(rag)
            for j in range(0, len(ops), 256):
                fresh_index.apply(ops[j : j + 256])
            done = time.time()
            rebuilds += 1
            for i in range(arrived):
                if i not in fresh:
                    fresh[i] = done - (start + i / opts.rate)
            if serving is not None:
                serving.drop()
                serving.close()
            serving = fresh_index
            for v in list(vectors.values())[:50]:
                t0 = time.perf_counter()
                serving.query(v, 3)
                result.query_ms.append((time.perf_counter() - t0) * 1000)
            progress(f"batch: rebuild {rebuilds} held {arrived} documents ({done - began:.1f} s)")
            next_at = max(began + opts.batch_interval_s, done)
        result.fresh_s = [fresh[i] for i in sorted(vectors)]
        result.throughput_docs_s = len(texts) / (time.time() - start)
        result.notes.append(f"{rebuilds} rebuilds; freshness over the same sampled documents")
    finally:
        embed.close()
        if serving is not None:
            serving.drop()
            serving.close()
    return result


# -- recall -------------------------------------------------------------------------------


def _recall(config: Config, queries: np.ndarray, k: int) -> dict[str, Any]:
    """recall@k of the live collection against brute force over the vectors it stores."""
    import chromadb
    from chromadb.config import Settings

    from flinkai.rag.chroma import ChromaIndex
    from flinkai.rag.index import Chunk, UpsertDocument
    from flinkai.rag.memory import MemoryIndex

    client = chromadb.HttpClient(
        host=config.rag.host, port=config.rag.port, settings=Settings(anonymized_telemetry=False)
    )
    stored = client.get_collection(config.rag.collection).get(include=["embeddings", "documents"])
    exact = MemoryIndex()
    by_doc: dict[str, list[Chunk]] = {}
    embeddings: Any = stored["embeddings"]
    documents: Any = stored["documents"]
    for cid, v, text in zip(stored["ids"], embeddings, documents, strict=True):
        doc_id = cid.rsplit("#", 1)[0]
        by_doc.setdefault(doc_id, []).append(Chunk(doc_id, cid, text or "", np.asarray(v)))
    exact.apply(
        [
            UpsertDocument(d, 1, tuple(sorted(c, key=lambda c: int(c.chunk_id.rsplit("#", 1)[1]))))
            for d, c in by_doc.items()
        ]
    )
    live = ChromaIndex(config.rag)
    try:
        recalls = []
        for q in queries:
            want = {h.chunk_id for h in exact.query(q, k)}
            got = {h.chunk_id for h in live.query(q, k)}
            recalls.append(len(want & got) / max(1, len(want)))
    finally:
        live.close()
    return {
        f"recall@{k}": float(np.mean(recalls)),
        "queries": len(recalls),
        "indexed_chunks": len(stored["ids"]),
        "hnsw": {
            "ef_construction": config.rag.hnsw_ef_construction,
            "ef_search": config.rag.hnsw_ef_search,
            "max_neighbors": config.rag.hnsw_max_neighbors,
        },
    }


# -- the run ------------------------------------------------------------------------------


def run_rag_bench(opts: RagBenchOptions, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Both phases and recall, on a fresh Kafka broker and Chroma server in a temp dir."""
    from flinkai.kafka.broker import LocalKafka
    from flinkai.local.process import free_port
    from flinkai.rag.server import ChromaServer

    articles = _articles(opts.docs + opts.queries)
    texts, held_out = articles[: opts.docs], articles[opts.docs :]
    base = load_config()
    with tempfile.TemporaryDirectory(prefix="flinkai-bench-rag-") as tmp:
        work = Path(tmp)
        with (
            LocalKafka(work / "kafka", port=free_port()) as broker,
            ChromaServer(work / "chroma") as chroma,
            ProcessRss() as rss,
        ):
            rag = asdict(replace(chroma.config(base.rag), collection="bench-live"))
            config = base.with_overrides(rag=rag)
            sampled = list(range(0, opts.docs, opts.sample_every))
            progress(f"embedding {len(sampled)} probe and {len(held_out)} query vectors")
            probe_vectors = _embed(config, [texts[i] for i in sampled])
            vectors = dict(zip(sampled, probe_vectors, strict=True))
            query_vectors = _embed(config, held_out)
            stream = _stream_phase(opts, config, broker.bootstrap, texts, vectors, progress)
            stream.peak_rss_mb = dict(rss.peak_mb)
            progress("recall@10 against brute force over the stored vectors")
            recall = _recall(config, query_vectors, opts.k)
        phases = [stream.row()]
        ratios: dict[str, float | None] = {}
        notes = {"stream": stream.notes}
        for pair in stream.pairs:
            phases += [pair.stream.row(), pair.baseline.row()]
            ratios[f"{pair.segment.interval_s:g}"] = pair.ratio_p99()
            notes[pair.baseline.name] = pair.baseline.notes
        if opts.baseline == "rebuild":
            with ChromaServer(work / "chroma-batch") as chroma, ProcessRss() as rss:
                rag = asdict(replace(chroma.config(base.rag), collection="bench-batch"))
                config = base.with_overrides(rag=rag)
                batch = _batch_phase(opts, config, texts, vectors, progress)
                batch.peak_rss_mb = dict(rss.peak_mb)
            phases.append(batch.row())
            notes["batch"] = batch.notes
            p99 = (_pct(stream.fresh_s, 99), _pct(batch.fresh_s, 99))
            ratios["rebuild"] = (p99[1] / p99[0]) if p99[0] and p99[1] else None
    return {
        "benchmark": "rag",
        "options": asdict(opts),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "gpu": _gpu_status(base, SystemProbe().report()),
        "freshness_path": "through the Flink job (jobs/rag_ingest.sql on the MiniCluster)",
        "phases": phases,
        "notes": notes,
        # baseline p99 / the stream's p99 over the same documents (rebuild: all documents)
        "baseline_over_stream_freshness_p99": ratios,
        "recall": recall,
    }


def _gpu_status(config: Config, report: DeviceReport) -> str:
    """The GPU line: the embedder's device (the only stage with a GPU path; Chroma is CPU)."""
    backend = config.embedding.backend
    if backend == "onnx":
        what = f"the embedder (ONNX Runtime, onnx.provider: {config.onnx.provider})"
        line = gpu_status(report, config.onnx.provider, what)
    elif backend == "triton":
        line = "on the Triton server's device (embedding.backend: triton; not probed here)"
    else:  # sentence_transformers: the backend builds its model on the CPU device
        line = gpu_status(report, None, f"the embedder (embedding.backend: {backend})")
    return f"{line}; the Chroma index searches on the CPU"


def _table(result: dict[str, Any]) -> str:
    cols = [
        ("index", "{}"),
        ("rate_docs_s", "{:g}"),
        ("freshness_p50_s", "{:.2f}"),
        ("freshness_p99_s", "{:.2f}"),
        ("query_p50_ms", "{:.1f}"),
        ("query_p99_ms", "{:.1f}"),
        ("ingest_docs_s", "{:.1f}"),
        ("probed", "{}"),
        ("never_queryable", "{}"),
    ]
    lines = ["| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    for row in result["phases"]:
        cells = [fmt.format(row[c]) if row[c] is not None else "n/a" for c, fmt in cols]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("peak RSS (MB):")
    for row in result["phases"]:  # the pairs run inside the stream phase: no RSS of their own
        shown = ", ".join(f"{k} {v:.0f}" for k, v in sorted(row["peak_rss_mb"].items()))
        if shown:
            lines.append(f"  {row['index']}: {shown}")
    for name, ratio in result["baseline_over_stream_freshness_p99"].items():
        shown = f"{ratio:.1f}x" if ratio else "n/a"
        lines.append(f"freshness p99, baseline {name} / stream (same documents): {shown}")
    for name, notes in result["notes"].items():
        lines += [f"{name}: {n}" for n in notes]
    rec = result["recall"]
    lines.append(
        f"recall@10 (live HNSW vs exact): {rec['recall@10']:.4f} over {rec['queries']} queries"
    )
    lines.append(f"path: {result['freshness_path']}; GPU: {result['gpu']}")
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    opts = PROFILES["quick" if args.quick else "default"]
    overrides = {
        k: v
        for k, v in (
            ("docs", args.docs),
            ("rate", args.rate),
            ("batch_interval_s", args.batch_interval),
            ("baseline", args.baseline),
            ("intervals_s", args.intervals),
            ("sample_every", args.sample_every),
        )
        if v is not None
    }
    opts = replace(opts, **overrides)
    for name in ("kafka", "chromadb", "urllib3", "py4j"):
        logging.getLogger(name).setLevel(logging.WARNING)
    result = run_rag_bench(opts)
    print(_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _intervals(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of seconds: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"intervals must be > 0 seconds: {text!r}")
    return values


def register(subparsers: Any) -> None:
    """Add ``flinkai bench rag``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "rag",
        help="live RAG index freshness vs micro-batch reindexing (AG News)",
        description="Stream AG News articles through jobs/rag_ingest.sql into Chroma and "
        "measure freshness, query latency, throughput, RSS and recall@10, against a "
        "baseline that reindexes the changed documents every 1/5/10 s beside it.",
    )
    parser.add_argument("--quick", action="store_true", help="600 documents at 20/s")
    parser.add_argument("--docs", type=int, help="documents streamed (3000)")
    parser.add_argument("--rate", type=float, help="documents per second (50)")
    parser.add_argument(
        "--baseline",
        choices=("microbatch", "rebuild"),
        help="microbatch (default): incremental reindex beside the stream, same load; "
        "rebuild: re-embed everything into a fresh collection, after the stream",
    )
    parser.add_argument(
        "--intervals",
        type=_intervals,
        help="micro-batch periods in seconds, comma-separated (1,5,10)",
    )
    parser.add_argument("--sample-every", type=int, help="probe every n-th document (10)")
    parser.add_argument("--batch-interval", type=float, help="rebuild baseline period, s (10)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.set_defaults(handler=_handle)


def _suite_rows(size: int | None) -> list[dict[str, Any]]:
    opts = replace(PROFILES["quick"], docs=size or PROFILES["quick"].docs)
    result = run_rag_bench(opts, progress=lambda _line: None)
    return [{**row, "peak_rss_mb": json.dumps(row["peak_rss_mb"])} for row in result["phases"]]


suite_entry = SuiteEntry(
    name="rag",
    description="Live RAG index (Kafka -> Flink -> Chroma) freshness vs micro-batch reindex, AG News.",
    sizes={"quick": 300, "default": 600, "full": 3000},
    run=_suite_rows,
    chart=("index", "freshness_p99_s"),
)
