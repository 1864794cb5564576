"""rag_ingest.sql and rag_answer.sql on real parts: Kafka, the Flink MiniCluster, MiniLM
(ONNX) and a real Chroma server on loopback.

One unbounded ingest job is shared by the module (module-scoped fixture):

1. functional phase: a 3-chunk document updated to 1 chunk, a delete by ``op`` and a
   delete by Kafka tombstone, an older replayed version, and poison records;
2. fault phase: a paced stream of updates, deletes and tombstones over 30 documents,
   with the job's Python workers SIGKILLed between two checkpoints. Flink restarts
   the job from the last checkpoint and replays into the index.

The final index is then compared, exactly, with the fold of the whole topic
(:func:`flinkai.testing.rag_index.fold_documents`): documents, versions with
tombstones, and every chunk id. rag_answer.sql runs bounded twice: on an empty
collection (``retrieve`` returns empty arrays, the answer is the fixed no-passages
one) and on the filled one, where each question is answered by the real SmolLM2 ONNX
decoder from its passages (prompt cut to ``ANSWER_LLM``'s 192 tokens, 8 new tokens).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flinkai.config import Config, load_config
from flinkai.functions.doc_events import MAX_DOCUMENT_BYTES, DocEvent, parse_doc_event
from flinkai.functions.llm import LlmCompleteFunction, load_prompt_model
from flinkai.functions.rag_answer import NO_PASSAGES_ANSWER, Passage, RagAnswerFunction
from flinkai.functions.retrieve import Retriever
from flinkai.kafka.admin import (
    TopicSnapshot,
    create_topics,
    produce,
    read_to_end_offsets,
)
from flinkai.kafka.broker import LocalKafka
from flinkai.rag.chroma import ChromaIndex
from flinkai.rag.server import ChromaServer
from flinkai.runtime.cluster import FlinkRest
from flinkai.runtime.runner import RunOptions, RunResult, run_script
from flinkai.testing.rag_index import ExpectedIndex, diff_index, fold_documents

from .llm import require_decoder
from .streaming import (
    completed_checkpoints,
    gone,
    kill_python_workers,
    python_workers,
    wait_until,
    with_rest,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
T0 = 1764576000000
LONG = " ".join(f"alpha{i} beta gamma" for i in range(100))  # 300 words: 3 chunks
POISON: dict[bytes, str] = {
    b"not json": "not_json",
    b'{"text": "x", "updated_at": 1}': "missing_field",
    b'{"doc_id": "p1", "text": "x", "updated_at": 1, "op": "merge"}': "invalid_field",
    b'{"doc_id": "p2", "text": "   ", "updated_at": 1}': "empty_text",
    b"\xff\xfe{}": "invalid_utf8",
}
#: The answer runs' LLM settings: short prompts (passages are cut to fit) and few new
#: tokens keep the decoder's share of the module's time small.
ANSWER_LLM = {"max_new_tokens": 8, "max_prompt_tokens": 192}
FAULT_DOCS = 30
#: 25 s at RATE; in two runs the job had restarted within 11 s of its start. The first
#: 32 events (8 s) and the other 68 each hold every kind: upsert, delete, tombstone,
#: stale copy.
FAULT_EVENTS = 100
RATE = 4.0
WORKER_MODE = "_python_worker_execution_mode"


def doc(doc_id: str, version: int, text: str | None = None, op: str = "upsert") -> bytes:
    body: dict[str, Any] = {"doc_id": doc_id, "updated_at": version, "op": op}
    if text is not None:
        body["text"] = text
    return json.dumps(body).encode()


def send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Produce (key, value) records in order; a None value is a tombstone."""
    for key, value in records:
        produce(bootstrap, topic, [value], key=key)


def fault_stream(seed: int = 7) -> list[tuple[bytes, bytes | None]]:
    """Updates (some with fewer chunks), out-of-order older versions, deletes, tombstones.

    Versions start a minute before now, so a tombstone (versioned by its record
    timestamp, i.e. now) is overtaken by later upserts of some documents.
    """
    rng = random.Random(seed)
    start = int(time.time() * 1000) - 60_000
    version = {f"s-{i}": start for i in range(FAULT_DOCS)}
    out: list[tuple[bytes, bytes | None]] = []
    for n in range(FAULT_EVENTS):
        d = f"s-{rng.randrange(FAULT_DOCS)}"
        roll = rng.random()
        version[d] += 1000
        if roll < 0.08:
            out.append((d.encode(), None))  # tombstone, at the record's (current) timestamp
            continue
        if roll < 0.16:
            out.append((d.encode(), doc(d, version[d], op="delete")))
            continue
        if roll < 0.24:  # a late, older version: must never win
            out.append((d.encode(), doc(d, version[d] - 5000, f"stale copy of {d}")))
            continue
        words = rng.choice([5, 40, 200])  # 1 or 2 chunks
        text = " ".join(f"{d} event{n} w{j}" for j in range(words // 3 + 1))
        out.append((d.encode(), doc(d, version[d], text)))
    return out


@dataclass
class IngestRun:
    """What the module's ingest job did; the tests read it."""

    config: Config
    api: FlinkRest
    topics: tuple[str, str, str]
    phase_a: dict[str, Any] = field(default_factory=dict)
    fault: dict[str, Any] = field(default_factory=dict)
    docs: TopicSnapshot | None = None
    acks: TopicSnapshot | None = None
    raw_acks: TopicSnapshot | None = None
    dlq: TopicSnapshot | None = None
    expected: ExpectedIndex | None = None
    final: dict[str, Any] = field(default_factory=dict)


def _rag_config(server: ChromaServer, collection: str) -> dict[str, Any]:
    return dataclasses.asdict(dataclasses.replace(server.config(), collection=collection))


def _committed(bootstrap: str, topics: tuple[str, ...]) -> int:
    return sum(len(read_to_end_offsets(bootstrap, t, timeout_s=30).records) for t in topics)


def _start(script: str, config: Config, variables: dict[str, str], wait: bool) -> RunResult:
    options = RunOptions(variables=variables, wait=wait, timeout_s=170 if wait else 0)
    return run_script(REPO / "jobs" / script, config, options)


@pytest.fixture(scope="module")
def ingest(
    kafka_broker: LocalKafka, chroma_server: ChromaServer, model_artifacts: object
) -> Iterator[IngestRun]:
    run_id = uuid.uuid4().hex[:8]
    base = load_config(env={}).with_overrides(
        rag=_rag_config(chroma_server, f"rag-ingest-{run_id}")
    )
    # The kill lands in the first half of an interval, right after an index write: at
    # RATE, 2.5 s hold about 10 events.
    config, api = with_rest(base.with_overrides(runtime={"checkpoint_interval_ms": 5000}))
    topics = (f"docs-{run_id}", f"acks-{run_id}", f"rag-dlq-{run_id}")
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, list(topics))
    run = IngestRun(config, api, topics)
    interval_s = config.runtime.checkpoint_interval_ms / 1000
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "DOCS_TOPIC": topics[0],
        "ACKS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        "GROUP_ID": f"rag-{run_id}",
        "SCAN_BOUNDED_MODE": "unbounded",
    }
    with pytest.MonkeyPatch.context() as mp:
        # Python workers as child processes of the MiniCluster JVM, so they can be killed.
        mp.setenv(WORKER_MODE, "process")
        result = _start("rag_ingest.sql", config, variables, wait=False)
    job_id = result.job_id
    assert job_id
    started = time.monotonic()
    timings: dict[str, float] = {}
    run.fault["timings"] = timings
    try:
        # -- functional phase ---------------------------------------------------------
        first: list[tuple[bytes, bytes | None]] = [
            (b"long", doc("long", T0, LONG)),
            (b"gone-op", doc("gone-op", T0, "a note about volcano eruptions in Iceland")),
            (b"gone-tomb", doc("gone-tomb", T0, "a recipe for sourdough bread with rye")),
            (b"keep", doc("keep", T0 + 10, "the chess world championship match")),
        ]
        send(bootstrap, topics[0], first)
        produce(bootstrap, topics[0], list(POISON))
        n_first = len(first) + len(POISON)
        assert wait_until(lambda: _committed(bootstrap, topics[1:]) >= n_first, 240, 2.0), (
            "the ingest job did not ack the first documents in 240 s"
        )
        timings["first acks"] = time.monotonic() - started
        index = ChromaIndex(config.rag)
        run.phase_a["before"] = {"chunks": index.chunk_ids(), "docs": index.documents()}
        second: list[tuple[bytes, bytes | None]] = [
            (b"long", doc("long", T0 + 1, "the long document is now one short chunk")),
            (b"gone-op", doc("gone-op", T0 + 1, op="delete")),
            (b"gone-tomb", None),
            (b"keep", doc("keep", T0, "an older version that must not win")),
        ]
        send(bootstrap, topics[0], second)
        n_a = n_first + len(second)
        assert wait_until(lambda: _committed(bootstrap, topics[1:]) >= n_a, 120, 2.0)
        run.phase_a["after"] = {"chunks": index.chunk_ids(), "docs": index.documents()}
        retriever = Retriever(config)
        retriever.open()
        try:
            run.phase_a["hits"] = {
                d: retriever(text, 10)
                for d, text in (
                    ("gone-op", "volcano eruptions in Iceland"),
                    ("gone-tomb", "sourdough bread recipe with rye"),
                    ("keep", "chess world championship"),
                )
            }
        finally:
            retriever.close()
        index.close()

        # -- fault phase ----------------------------------------------------------------
        timings["phase a"] = time.monotonic() - started
        stream = fault_stream()
        restarts_before = api.restarts(job_id)
        workers = python_workers()

        def paced() -> None:
            # Paced against the clock, so each send's own round trip (a new producer)
            # does not slow the stream below RATE.
            t0 = time.monotonic()
            for i, record in enumerate(stream):
                send(bootstrap, topics[0], [record])
                time.sleep(max(0.0, t0 + (i + 1) / RATE - time.monotonic()))

        producer = threading.Thread(target=paced, daemon=True)
        producer.start()
        # Kill right after the index changed in the first half of a checkpoint interval:
        # that write happened after the last completed checkpoint, so the restore must
        # replay its event (and the next checkpoint is still seconds away).
        index = ChromaIndex(config.rag)
        writing = False
        for _ in range(8):
            first = api.latest_checkpoint_ack_ms(job_id)
            wait_until(
                lambda f=first: api.latest_checkpoint_ack_ms(job_id) > f, 4 * interval_s + 30
            )
            before = index.versions()
            if wait_until(lambda b=before: index.versions() != b, interval_s / 2, 0.2):
                writing = True
                break
        index.close()
        assert writing, "the index did not change between checkpoints while the stream ran"
        killed_at_ms = time.time() * 1000
        killed = kill_python_workers()
        restarted = wait_until(lambda: api.restarts(job_id) > restarts_before, 120)
        timings["killed"] = time.monotonic() - started
        run.fault |= {
            "workers": workers,
            "killed": killed,
            "killed_gone": all(gone(p) for p in killed),
            "restarted": restarted,
            "restarts": api.restarts(job_id) - restarts_before,
            "exceptions_after_kill": [
                e
                for e in api.job_exceptions(job_id)
                if int(e.get("timestamp", 0)) >= killed_at_ms - 1000
            ],
            "workers_after": {},
        }
        producer.join(timeout=120)
        assert not producer.is_alive()
        n_all = n_a + len(stream)
        assert wait_until(lambda: _committed(bootstrap, topics[1:]) >= n_all, 240, 2.0), (
            f"only {_committed(bootstrap, topics[1:])} of {n_all} records acked or dead-lettered"
        )
        timings["all acked"] = time.monotonic() - started
        run.fault["workers_after"] = python_workers()
        # Two more checkpoints: a late duplicate ack would be committed before the stop.
        seen = completed_checkpoints(api, job_id)
        wait_until(lambda: completed_checkpoints(api, job_id) >= seen + 2, 6 * interval_s + 30)
    finally:
        if result.job_client is not None:
            # a job that already ended cannot be cancelled
            with contextlib.suppress(Exception):
                result.job_client.cancel().result()
    run.docs = read_to_end_offsets(bootstrap, topics[0], timeout_s=60)
    run.acks = read_to_end_offsets(bootstrap, topics[1], timeout_s=60)
    run.raw_acks = read_to_end_offsets(bootstrap, topics[1], "read_uncommitted", timeout_s=60)
    run.dlq = read_to_end_offsets(bootstrap, topics[2], timeout_s=60)
    run.expected = fold_documents(
        ((r.key, r.value, r.timestamp_ms) for r in run.docs.records), config.rag
    )
    with ChromaIndex(config.rag) as index:  # a fresh client: only the server's state counts
        run.final = {
            "versions": index.versions(),
            "documents": index.documents(),
            "chunks": index.chunk_ids(),
            "count": index.count(),
        }
    yield run


def _values(snapshot: TopicSnapshot | None) -> list[dict[str, Any]]:
    assert snapshot is not None
    return [json.loads(r.value or b"null") for r in snapshot.records]


def test_update_replaces_all_old_chunks(ingest: IngestRun) -> None:
    before, after = ingest.phase_a["before"], ingest.phase_a["after"]
    # Evidence: the long document was stored as 3 chunks first.
    assert {c for c in before["chunks"] if c.startswith("long#")} == {"long#0", "long#1", "long#2"}
    assert {c: v for c, v in after["chunks"].items() if c.startswith("long#")} == {"long#0": T0 + 1}
    assert after["docs"]["long"] == T0 + 1
    # The older replayed version of "keep" did not win.
    assert after["docs"]["keep"] == T0 + 10


def test_delete_and_tombstone_remove_documents_from_results(ingest: IngestRun) -> None:
    before, after = ingest.phase_a["before"], ingest.phase_a["after"]
    assert {"gone-op", "gone-tomb"} <= set(before["docs"])
    assert not {"gone-op", "gone-tomb"} & set(after["docs"])
    assert not [c for c in after["chunks"] if c.startswith("gone-")]
    hits = ingest.phase_a["hits"]
    for gone_doc in ("gone-op", "gone-tomb"):
        assert hits[gone_doc] and gone_doc not in {h.doc_id for h in hits[gone_doc]}
    assert hits["keep"][0].doc_id == "keep"
    # The tombstone went through the job (an ack for a null-value record), not around it.
    acks = _values(ingest.acks)
    tomb = [a for a in acks if a["doc_id"] == "gone-tomb" and a["op"] == "delete"]
    assert tomb and tomb[0]["outcome"] == "APPLIED"


def test_poison_events_reach_the_dlq_with_reasons(ingest: IngestRun) -> None:
    assert ingest.docs is not None
    offsets = {r.offset: r.value for r in ingest.docs.records if r.value in POISON}
    dead = _values(ingest.dlq)
    by_offset = {d["source_offset"]: d for d in dead}
    assert len(dead) == len(by_offset), "a dead letter was written twice"
    assert set(by_offset) == set(offsets), (sorted(by_offset), sorted(offsets))
    for offset, payload in offsets.items():
        d = by_offset[offset]
        assert payload is not None
        assert d["reason"] == POISON[payload], d
        assert base64.b64decode(d["payload_base64"]) == payload
        assert d["detail"]


def test_index_equals_the_topic_fold_after_a_restart_mid_stream(ingest: IngestRun) -> None:
    fault = ingest.fault
    print({k: v for k, v in fault.items() if k not in ("workers", "workers_after")})
    # Evidence: the UDF workers that wrote the index were killed, the kill failed the
    # task, Flink recorded it and restarted the job with new workers.
    assert fault["workers"], "no Python UDF worker process under the MiniCluster"
    assert sorted(fault["killed"]) == sorted(fault["workers"])
    assert fault["killed_gone"], f"a killed worker is still alive: {fault['killed']}"
    assert fault["restarted"] and fault["restarts"] >= 1
    assert fault["exceptions_after_kill"], "no failure recorded after the kill"
    assert fault["workers_after"] and not set(fault["workers_after"]) & set(fault["killed"])
    assert ingest.acks is not None and ingest.raw_acks is not None and ingest.docs is not None
    # Acks of the killed attempt that read_committed hides (informational: whether the
    # sink had sent any before the kill depends on its batching).
    aborted = len(ingest.raw_acks.records) - len(ingest.acks.records)
    # Evidence of the replay: the restored job wrote events to the index again. A
    # committed ack says STALE for an event that was the newest of its document in
    # topic order, which only happens when the killed attempt had already applied it.
    newest: dict[str, int] = {}
    fresh_offsets: set[int] = set()
    for r in ingest.docs.records:
        event = parse_doc_event(r.key, r.value, r.timestamp_ms, MAX_DOCUMENT_BYTES)
        if isinstance(event, DocEvent) and event.version > newest.get(event.doc_id, -1):
            newest[event.doc_id] = event.version
            fresh_offsets.add(r.offset)
    replayed = [
        a
        for a in _values(ingest.acks)
        if a["outcome"] == "STALE" and a["source_offset"] in fresh_offsets
    ]
    assert replayed, "no replayed write reached the version guard"
    # Every input record has exactly one committed ack or dead letter.
    outputs = Counter(d["source_offset"] for d in _values(ingest.acks) + _values(ingest.dlq))
    assert sorted(outputs) == [r.offset for r in ingest.docs.records]
    assert set(outputs.values()) == {1}, {o: n for o, n in outputs.items() if n > 1}
    # Outcome: the index is the fold of the topic, exactly (no ghost, nothing missing).
    expected, final = ingest.expected, ingest.final
    assert expected is not None
    print(
        f"{fault['restarts']} restart(s), {aborted} aborted ack(s), {len(replayed)} replayed "
        f"write(s) found STALE; timings {fault['timings']}; index: "
        f"{len(final['documents'])} documents, {final['count']} chunks, "
        f"{len(final['versions']) - len(final['documents'])} tombstones"
    )
    assert len(expected.documents) > 10 and len(expected.versions) > len(expected.documents)
    assert diff_index(expected, final["versions"], final["documents"], final["chunks"]) == []
    assert final["count"] == len(expected.chunk_ids)


def _answer(
    kafka_broker: LocalKafka, config: Config, questions: list[bytes], run_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    topics = (f"q-{run_id}", f"ans-{run_id}", f"ans-dlq-{run_id}")
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, list(topics))
    produce(bootstrap, topics[0], questions)
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "QUESTIONS_TOPIC": topics[0],
        "ANSWERS_TOPIC": topics[1],
        "DLQ_TOPIC": topics[2],
        "GROUP_ID": f"ans-{run_id}",
        "SCAN_BOUNDED_MODE": "latest-offset",
        "TOP_K": "3",
    }
    _start("rag_answer.sql", config.with_overrides(llm=ANSWER_LLM), variables, wait=True)
    answers = read_to_end_offsets(bootstrap, topics[1], timeout_s=30)
    dead = read_to_end_offsets(bootstrap, topics[2], timeout_s=30)
    return (
        [json.loads(r.value or b"null") for r in answers.records],
        [json.loads(r.value or b"null") for r in dead.records],
    )


QUESTIONS = [
    b'{"id": "q1", "question": "who plays in the chess championship?"}',
    b'{"id": "q2", "question": "long document alpha beta gamma"}',
    b"not json",
    b'{"id": "q3"}',
]


def test_answer_job_on_an_empty_index_returns_empty_arrays(
    kafka_broker: LocalKafka, chroma_server: ChromaServer, model_artifacts: object
) -> None:
    require_decoder()
    run_id = uuid.uuid4().hex[:8]
    config = load_config(env={}).with_overrides(
        rag=_rag_config(chroma_server, f"rag-empty-{run_id}")
    )
    answers, dead = _answer(kafka_broker, config, QUESTIONS, run_id)
    assert sorted(a["id"] for a in answers) == ["q1", "q2"]
    assert all(a["passages"] == [] for a in answers), answers
    # No passages: the fixed answer, no sources, and no model call (no model_version).
    for a in answers:
        assert a["answer"] == NO_PASSAGES_ANSWER and a["sources"] == [], a
        assert a["prompt_tokens"] == 0 and "model_version" not in a, a
    assert sorted(d["reason"] for d in dead) == ["missing_field", "not_json"]


def test_answer_job_enriches_questions_with_top_k_passages(
    ingest: IngestRun, kafka_broker: LocalKafka
) -> None:
    require_decoder()
    answers, dead = _answer(kafka_broker, ingest.config, QUESTIONS, uuid.uuid4().hex[:8])
    assert sorted(a["id"] for a in answers) == ["q1", "q2"]  # one answer per question
    by_id = {a["id"]: a for a in answers}
    live = set(ingest.final["documents"])
    for a in answers:
        passages = a["passages"]
        assert len(passages) == 3
        assert [p["score"] for p in passages] == sorted(
            (p["score"] for p in passages), reverse=True
        )
        assert all(
            p["doc_id"] in live and p["chunk_id"].startswith(p["doc_id"] + "#") for p in passages
        )
    assert by_id["q1"]["passages"][0]["doc_id"] == "keep"
    assert by_id["q1"]["passages"][0]["text"] == "the chess world championship match"
    assert sorted(d["reason"] for d in dead) == ["missing_field", "not_json"]

    # The answers: the sources are the passages retrieve returned, in order, and each
    # answer is what the same generation gives outside Flink for the same prompt.
    config = ingest.config.with_overrides(llm={**ANSWER_LLM, "store": "none"})
    model = load_prompt_model(config)
    direct = RagAnswerFunction(LlmCompleteFunction(config, model, None))
    for a in answers:
        print({k: a[k] for k in ("id", "answer", "sources", "cited", "prompt_tokens", "ttft_ms")})
        assert a["answer"].strip()
        assert a["sources"] == [p["chunk_id"] for p in a["passages"]]
        assert a["dropped_passages"] == 0
        assert set(a["cited"]) <= set(a["sources"])
        assert a["model_version"] == model.decoder.model_version
        assert 0 < a["prompt_tokens"] <= ANSWER_LLM["max_prompt_tokens"] and a["ttft_ms"] > 0
        want = direct(a["question"], [Passage(p["chunk_id"], p["text"]) for p in a["passages"]])
        assert want.error is None
        assert a["answer"] == want.answer, a["id"]
        assert a["prompt_tokens"] == want.prompt_tokens
        assert a["truncated_passages"] == want.truncated_passages
        assert tuple(a["cited"]) == want.cited
