"""The :class:`~flinkai.rag.index.VectorIndex` on a Chroma server (HTTP).

Two collections per index, both in the server, so a fresh client (a restarted
Flink job) sees everything the last one wrote:

- ``<collection>``: one record per live chunk: id ``doc_id#n``, the embedding
  (cosine HNSW), the passage as the document, metadata ``{doc_id, version}``.
- ``<collection>.versions``: one record per document ever seen: id ``doc_id``,
  metadata ``{version, deleted}``. A deleted document keeps its record: that
  tombstone is what stops an older upsert replayed later from resurrecting it.

A batch is written in three steps, the version records last:

1. upsert the winning upserts' chunks (ids ``doc_id#0..n-1`` are overwritten);
2. delete every other chunk of those documents (ids read just before step 1), so a
   new version with fewer chunks, or a delete, leaves none behind;
3. upsert the version records.

A crash anywhere before step 3 leaves the old version record, so the replayed
operation is applied again and the same three steps converge. Until step 2 ends, a
query may see the new chunks next to old ones of the same document; it never sees a
changed document with no chunks at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from flinkai.config import RagConfig
from flinkai.errors import require
from flinkai.rag.errors import IndexUnavailableError, InvalidChunkError
from flinkai.rag.index import (
    Chunk,
    DeleteDocument,
    Hit,
    Operation,
    Outcome,
    UpsertDocument,
    VectorIndex,
    normalise,
    plan_outcomes,
    validate_operation,
)

__all__ = ["VERSIONS_SUFFIX", "ChromaIndex"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Suffix of the collection holding per-document versions and tombstones.
VERSIONS_SUFFIX = ".versions"
#: Version records need an embedding; a constant one-dimensional one is never searched.
_NO_VECTOR = [1.0]
#: Records fetched per ``get`` when listing a whole collection.
_PAGE = 5000


class ChromaIndex(VectorIndex):
    """Documents of chunks in a Chroma collection, versions in a second one.

    Args:
        config: The ``rag`` section: server, collection name, HNSW parameters.

    Raises:
        IndexUnavailableError: The server does not answer (the message names its URL
            and ``flinkai chroma start``).
        InvalidChunkError: The collection exists with another distance than cosine.
    """

    def __init__(self, config: RagConfig) -> None:
        self.config = config
        self.url = config.url
        chromadb = require("chromadb", "rag")
        from chromadb.config import Settings

        versions_name = config.collection + VERSIONS_SUFFIX
        if len(versions_name) > 512:
            raise InvalidChunkError(
                f"rag.collection is too long: {versions_name!r} must fit in 512 characters"
            )
        if config.tls and config.ca_file and not Path(config.ca_file).is_file():
            raise IndexUnavailableError(
                f"rag.ca_file {config.ca_file!r} for the Chroma server at {self.url} "
                "is not a readable file"
            )
        # ssl_verify: None keeps httpx's default (the system store); a path pins the CA.
        settings = Settings(
            anonymized_telemetry=False,
            chroma_server_ssl_verify=(config.ca_file or None) if config.tls else None,
        )
        self._client: Any = self._call(
            "connect",
            lambda: chromadb.HttpClient(  # type: ignore[attr-defined]
                host=config.host,
                port=config.port,
                ssl=config.tls,
                settings=settings,
            ),
        )
        self._set_timeout(config.timeout_s)
        hnsw = {
            "space": "cosine",
            "ef_construction": config.hnsw_ef_construction,
            "ef_search": config.hnsw_ef_search,
            "max_neighbors": config.hnsw_max_neighbors,
        }
        self._chunks: Any = self._call(
            "open collection",
            lambda: self._client.get_or_create_collection(
                config.collection, configuration={"hnsw": hnsw}, embedding_function=None
            ),
        )
        self._check_space()
        self._versions: Any = self._call(
            "open collection",
            lambda: self._client.get_or_create_collection(
                versions_name, configuration={"hnsw": {"space": "l2"}}, embedding_function=None
            ),
        )
        self._max_batch: int = self._call("ask", self._client.get_max_batch_size)
        self._dim: int | None = self._stored_dim()

    # -- the contract ------------------------------------------------------------

    def apply(self, ops: Sequence[Operation]) -> list[Outcome]:
        if not ops:
            return []
        dim = self._dim
        for op in ops:
            validate_operation(op, dim)
            if isinstance(op, UpsertDocument) and op.chunks and dim is None:
                dim = int(np.asarray(op.chunks[0].vector).shape[0])
        doc_ids = list(dict.fromkeys(op.doc_id for op in ops))
        current = {
            doc_id: int(meta["version"])
            for doc_id, meta in self._get_metadata(self._versions, ids=doc_ids)
        }
        outcomes, winners = plan_outcomes(ops, current)
        if not winners:
            return outcomes
        # Step 0: the chunks the winners have now (read before step 1 writes).
        existing = [
            chunk
            for chunk, _ in self._get_metadata(
                self._chunks, where={"doc_id": {"$in": list(winners)}}
            )
        ]
        # Step 1: the new chunks.
        ids: list[str] = []
        vectors: list[np.ndarray] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        for op in winners.values():
            if isinstance(op, UpsertDocument):
                for c in op.chunks:
                    ids.append(c.chunk_id)
                    vectors.append(normalise(c.vector))
                    texts.append(c.text)
                    metas.append({"doc_id": op.doc_id, "version": op.version})
        for lo in range(0, len(ids), self._max_batch):
            hi = lo + self._max_batch
            self._call(
                "upsert chunks",
                partial(
                    self._chunks.upsert,
                    ids=ids[lo:hi],
                    embeddings=np.stack(vectors[lo:hi]),
                    documents=texts[lo:hi],
                    metadatas=metas[lo:hi],
                ),
            )
        if ids and self._dim is None:
            self._dim = dim
        # Step 2: everything else those documents had.
        keep = set(ids)
        stale = [chunk for chunk in existing if chunk not in keep]
        for lo in range(0, len(stale), self._max_batch):
            part = stale[lo : lo + self._max_batch]
            self._call("delete chunks", partial(self._chunks.delete, ids=part))
        # Step 3: the version records, last (see the module docstring).
        records = list(winners.values())
        for lo in range(0, len(records), self._max_batch):
            part_ops = records[lo : lo + self._max_batch]
            self._call(
                "write versions",
                partial(
                    self._versions.upsert,
                    ids=[op.doc_id for op in part_ops],
                    embeddings=[_NO_VECTOR] * len(part_ops),
                    metadatas=[
                        {"version": op.version, "deleted": isinstance(op, DeleteDocument)}
                        for op in part_ops
                    ],
                ),
            )
        return outcomes

    def query(self, vector: np.ndarray, k: int) -> list[Hit]:
        if k < 1:
            raise InvalidChunkError(f"k must be >= 1, got {k}")
        q = normalise(vector)
        if self._dim is None:
            self._dim = self._stored_dim()
        if self._dim is not None and q.shape[0] != self._dim:
            raise InvalidChunkError(
                f"query vector has dimension {q.shape[0]}, the index holds {self._dim}"
            )
        if self._dim is None:
            return []  # nothing was ever written
        res = self._call(
            "query",
            lambda: self._chunks.query(
                query_embeddings=q[None, :],
                n_results=k,
                include=["distances", "documents", "metadatas"],
            ),
        )
        hits = [
            Hit(
                doc_id=str(meta["doc_id"]),
                chunk_id=str(cid),
                # Chroma's cosine distance is 1 - cosine similarity.
                score=1.0 - float(dist),
                text=str(doc or ""),
            )
            for cid, dist, doc, meta in zip(
                res["ids"][0],
                res["distances"][0],
                res["documents"][0],
                res["metadatas"][0],
                strict=True,
            )
        ]
        hits.sort(key=lambda h: (-h.score, h.chunk_id))
        return hits[:k]

    def count(self) -> int:
        n: int = self._call("count", self._chunks.count)
        return n

    def documents(self) -> dict[str, int]:
        return {
            doc_id: int(meta["version"])
            for doc_id, meta in self._get_metadata(self._versions, where={"deleted": False})
        }

    def versions(self) -> dict[str, int]:
        return {doc_id: int(meta["version"]) for doc_id, meta in self._get_metadata(self._versions)}

    def chunk_ids(self) -> dict[str, int]:
        return {cid: int(meta["version"]) for cid, meta in self._get_metadata(self._chunks)}

    def stored_chunks(self) -> Iterator[tuple[Chunk, int]]:
        """Every stored chunk with its vector as Chroma holds it, and its version.

        For exact baselines (:func:`flinkai_bench.research.recall.exact_copy`); paged, so a
        large collection is not read in one response.
        """
        offset = 0
        while True:
            res = self._call(
                "read",
                partial(
                    self._chunks.get,
                    include=["embeddings", "documents", "metadatas"],
                    limit=_PAGE,
                    offset=offset,
                ),
            )
            for cid, vector, text, meta in zip(
                res["ids"], res["embeddings"], res["documents"], res["metadatas"], strict=True
            ):
                chunk = Chunk(str(meta["doc_id"]), cid, str(text or ""), np.asarray(vector))
                yield chunk, int(meta["version"])
            if len(res["ids"]) < _PAGE:
                return
            offset += len(res["ids"])

    def close(self) -> None:
        """Drop the HTTP connections; the data stays in the server."""
        server = getattr(self._client, "_server", None)
        session = getattr(server, "_session", None)
        if session is not None:
            session.close()

    def drop(self) -> None:
        """Delete both collections from the server (tests and benchmarks)."""
        for name in (self.config.collection, self.config.collection + VERSIONS_SUFFIX):
            self._call("delete collection", partial(self._client.delete_collection, name))

    # -- internals -----------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one client call; a failure becomes an error naming the server."""
        import httpx
        from chromadb.errors import ChromaError

        try:
            return fn()
        except (OSError, httpx.HTTPError, ChromaError, ValueError) as e:
            # ValueError: the client's "Could not connect to a Chroma server".
            hint = "Is it running? Start a local one with `flinkai chroma start`"
            if self.config.tls:
                ca = self.config.ca_file or "the system trust store"
                hint += f"; its certificate must be signed by a CA in {ca} (rag.ca_file)"
            raise IndexUnavailableError(
                f"the Chroma server at {self.url} failed to {what}: {type(e).__name__}: {e}. "
                + hint
            ) from e

    def _set_timeout(self, timeout_s: float) -> None:
        # The client's HTTP session has no timeout (it waits forever on a hung
        # server); a sink must fail and retry instead.
        import httpx

        session = getattr(getattr(self._client, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.timeout = httpx.Timeout(timeout_s)
        else:
            log.warning("cannot set the Chroma client timeout; requests may wait indefinitely")

    def _check_space(self) -> None:
        conf = getattr(self._chunks, "configuration", None) or {}
        space = (conf.get("hnsw") or {}).get("space") if isinstance(conf, dict) else None
        if space not in (None, "cosine"):
            raise InvalidChunkError(
                f"collection {self.config.collection!r} on {self.url} uses distance {space!r}; "
                "flinkai.rag needs cosine (drop it or choose another rag.collection)"
            )

    def _stored_dim(self) -> int | None:
        res = self._call("peek", lambda: self._chunks.peek(1))
        embeddings = res.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return None
        return len(embeddings[0])

    def _get_metadata(
        self,
        collection: Any,
        *,
        ids: list[str] | None = None,
        where: dict[str, Any] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(id, metadata) of the matching records, fetched page by page."""
        offset = 0
        while True:
            res = self._call(
                "read",
                partial(
                    collection.get,
                    ids=ids,
                    where=where,
                    include=["metadatas"],
                    limit=_PAGE,
                    offset=offset,
                ),
            )
            got = res["ids"]
            yield from zip(got, res["metadatas"], strict=True)
            if len(got) < _PAGE:
                return
            offset += len(got)
