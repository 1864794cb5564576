"""recall@10 of the Chroma index against exact search, on real AG News vectors.

``python -m flinkai_bench.rag_recall --json PATH`` embeds ``--docs`` AG News
articles (title + ". " + description, chunked with the ``rag`` config) with the
configured embedding backend (ONNX MiniLM by default), writes them to a fresh
Chroma server on a free loopback port through :class:`ChromaIndex` in batches,
and compares its top-10 with brute force (:func:`flinkai_bench.research.recall.exact_copy`
of what the collection stores) for ``--queries`` held-out articles. The query-time
``ef_search`` is swept, one collection per value with the same data (Chroma fixes
it when it loads a collection's index); the build parameters are the config's.
``--vectors random`` uses random Gaussian vectors instead: no structure, the hard
case for HNSW, and a check that the measurement does see recall below 1. Ingest rate and query latency are reported beside, for context only: this
is a recall measurement, not a throughput benchmark.

Benchmarks measure and report; they never assert.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.config import Config, load_config
from flinkai_bench.shared.suite import machine_info

__all__ = ["main", "run_recall"]

log = logging.getLogger(__name__)

EF_SWEEP = (10, 20, 50, 100, 200)


def _embed(config: Config, texts: list[str]) -> np.ndarray:
    from flinkai.backends.factory import create_embedding_backend

    backend = create_embedding_backend(config)
    backend.load()
    try:
        size = backend.batch_size()
        parts = [
            backend.infer_batch(texts[i : i + size]).outputs for i in range(0, len(texts), size)
        ]
    finally:
        backend.close()
    return np.concatenate(parts).astype(np.float32)


def _ag_news_ops(config: Config, docs: int, queries: int) -> tuple[list[Any], np.ndarray, str]:
    from flinkai.datasets import load_ag_news
    from flinkai.rag.chunking import chunk_document
    from flinkai.rag.index import Chunk, UpsertDocument

    rows = load_ag_news(limit=docs + queries)
    if len(rows) < docs + queries:
        raise ValueError(f"AG News has {len(rows)} rows; {docs} + {queries} were asked for")
    pieces = [
        (f"ag{i}", cid, text)
        for i, (_, article) in enumerate(rows[:docs])
        for cid, text in chunk_document(f"ag{i}", article, config.rag)
    ]
    vectors = _embed(config, [t for _, _, t in pieces] + [t for _, t in rows[docs:]])
    by_doc: dict[str, list[Chunk]] = {}
    for (doc_id, cid, text), v in zip(pieces, vectors[: len(pieces)], strict=True):
        by_doc.setdefault(doc_id, []).append(Chunk(doc_id, cid, text, v))
    ops = [UpsertDocument(doc_id, 1, chunks) for doc_id, chunks in by_doc.items()]
    what = (
        f"AG News, first {docs} articles indexed, next {queries} as queries ({config.model.name})"
    )
    return ops, vectors[len(pieces) :], what


def _random_ops(dim: int, docs: int, queries: int) -> tuple[list[Any], np.ndarray, str]:
    from flinkai.rag.index import Chunk, UpsertDocument

    rng = np.random.default_rng(0)
    x = rng.standard_normal((docs + queries, dim)).astype(np.float32)
    ops = [UpsertDocument(f"r{i}", 1, [Chunk(f"r{i}", f"r{i}#0", "", x[i])]) for i in range(docs)]
    what = f"{docs} random Gaussian {dim}-d vectors, {queries} random queries (no structure)"
    return ops, x[docs:], what


def run_recall(
    config: Config,
    docs: int = 2000,
    queries: int = 200,
    k: int = 10,
    batch: int = 100,
    vectors: str = "ag_news",
    sweep: tuple[int, ...] = EF_SWEEP,
) -> dict[str, Any]:
    """Embed (or draw) the vectors, then per ef_search build a collection and measure.

    Chroma fixes ``ef_search`` when a collection's index is loaded (changing it
    later with ``modify`` did not change results in a check on 1.5.9), so each value
    gets its own collection with the same data.
    """
    from flinkai.rag.chroma import ChromaIndex
    from flinkai.rag.server import ChromaServer
    from flinkai_bench.research.recall import exact_copy, recall_at_k

    began = time.perf_counter()
    if vectors == "random":
        ops, query_vectors, what = _random_ops(config.model.dim, docs, queries)
    else:
        ops, query_vectors, what = _ag_news_ops(config, docs, queries)
    prepare_s = time.perf_counter() - began
    chunks = sum(len(op.chunks) for op in ops)
    rows = []
    with tempfile.TemporaryDirectory(prefix="flinkai-recall-") as tmp:
        server = ChromaServer(Path(tmp))
        server.start()
        try:
            for ef in sorted({*sweep, config.rag.hnsw_ef_search}):
                rag = replace(
                    server.config(config.rag), collection=f"recall-ef{ef}", hnsw_ef_search=ef
                )
                with ChromaIndex(rag) as index:
                    began = time.perf_counter()
                    for i in range(0, len(ops), batch):
                        index.apply(ops[i : i + batch])
                    ingest_s = time.perf_counter() - began
                    exact = exact_copy(index.stored_chunks())
                    if not exact.count() == chunks == index.count():
                        raise RuntimeError("the collection does not hold every chunk written")
                    result = recall_at_k(index, exact, query_vectors, k)
                rows.append(
                    {
                        "ef_search": ef,
                        **asdict(result),
                        "ingest_s": round(ingest_s, 2),
                        "ingest_docs_per_s": round(len(ops) / ingest_s, 1),
                    }
                )
                log.info("ef_search %d: recall@%d %.4f", ef, k, result.recall)
        finally:
            server.stop()
    configured = next(r for r in rows if r["ef_search"] == config.rag.hnsw_ef_search)
    return {
        "benchmark": "rag_recall",
        "vectors": vectors,
        "dataset": what,
        "embedding_backend": config.embedding.backend if vectors != "random" else None,
        "documents": len(ops),
        "chunks": chunks,
        "k": k,
        "hnsw": {
            "space": "cosine",
            "ef_construction": config.rag.hnsw_ef_construction,
            "max_neighbors": config.rag.hnsw_max_neighbors,
            "ef_search": config.rag.hnsw_ef_search,
        },
        "configured": configured,
        "ef_search_sweep": rows,
        "prepare_s": round(prepare_s, 2),
        "ingest_batch_docs": batch,
        "machine": machine_info(),
    }


def _table(res: dict[str, Any]) -> str:
    lines = [
        f"recall@{res['k']} of Chroma HNSW vs exact cosine: {res['dataset']} "
        f"({res['chunks']} chunks, M={res['hnsw']['max_neighbors']}, "
        f"ef_construction={res['hnsw']['ef_construction']})",
        "",
        "| ef_search | recall@k | worst query | queries with equal top-k | query p50 ms "
        "| query p99 ms | ingest docs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in res["ef_search_sweep"]:
        lines.append(
            f"| {row['ef_search']} | {row['recall']:.4f} | {row['worst']:.2f} | "
            f"{row['perfect']:.1%} | {row['query_ms_p50']:.1f} | {row['query_ms_p99']:.1f} | "
            f"{row['ingest_docs_per_s']} |"
        )
    lines.append("")
    lines.append(
        f"configured ef_search={res['hnsw']['ef_search']}: recall@{res['k']} "
        f"{res['configured']['recall']:.4f}; ingest {res['configured']['ingest_docs_per_s']} "
        f"docs/s in batches of {res['ingest_batch_docs']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m flinkai_bench.rag_recall [--docs N] [--queries N] [--json PATH]``."""
    p = argparse.ArgumentParser(prog="python -m flinkai_bench.rag_recall", description=__doc__)
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument(
        "--vectors",
        choices=("ag_news", "random"),
        default="ag_news",
        help="AG News embeddings, or random Gaussian vectors (a hard case with no structure)",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    res = run_recall(
        load_config(args.config),
        docs=args.docs,
        queries=args.queries,
        k=args.k,
        vectors=args.vectors,
    )
    print(_table(res))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
