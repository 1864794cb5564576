"""Apply document events to the live vector index: chunk, embed, version-guarded write.

Used by ``index_document`` in ``jobs/rag_ingest.sql``. One Arrow batch of parsed
events goes through three steps:

1. every upsert is chunked (``flinkai.rag.chunking``, ids ``doc_id#n``);
2. all chunks of the batch are embedded in one call of the project's embedding path
   (:class:`~flinkai.functions.embedding.EmbeddingFunction`, the model behind
   ``text_to_vector``);
3. the events are written to the index **in input order**, each as one
   ``upsert_document`` / ``delete_document`` call carrying the event's version.

Why this is effectively-once. The write is a side effect of the Python function and
is not part of Flink's checkpoint: after a failure, Flink replays every event read
since the last completed checkpoint and writes it again. Each write is idempotent
and version-guarded (the index replaces a document's chunks only for a newer version,
a delete leaves a version tombstone), so the index holds, per document, the event
with the highest version applied so far; a replayed older event is ``STALE`` and
changes nothing. Once the job has read the topic to a given offset, the index equals
the fold of the topic up to there, whatever failed in between.

Failures. A document whose chunks the model cannot embed gets ``inference_failed``
(the job dead-letters it). An unreachable index fails the task after a few retries
instead: Flink restarts it from the last checkpoint, and the replay rewrites the
events, so no event is dropped while the store is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flinkai.config import Config
from flinkai.functions.doc_events import DocEvent, DocOp
from flinkai.functions.events import Reason
from flinkai.functions.guard import RowGuard, internal_error_detail
from flinkai.functions.index_client import IndexClient
from flinkai.rag.chunking import TooManyChunksError, chunk_document
from flinkai.rag.errors import IndexUnavailableError, InvalidChunkError
from flinkai.rag.index import (
    Chunk,
    DeleteDocument,
    Operation,
    Outcome,
    UpsertDocument,
    VectorIndex,
)

__all__ = ["DocumentIndexer", "IndexResult"]

log = logging.getLogger(__name__)

#: Attempts at one write while the index is unreachable, before failing the task.
WRITE_ATTEMPTS = 4
#: First pause between attempts; doubled each time (0.5 + 1 + 2 s).
RETRY_PAUSE_S = 0.5


@dataclass(frozen=True)
class IndexResult:
    """What one event did: an outcome (``APPLIED`` / ``STALE``), or an error.

    Attributes:
        outcome: The index's answer; None when the event failed or was invalid.
        chunks: Chunks written (upsert) or 0 (delete); None when not applied.
        model_version: Model that embedded the chunks (upserts).
        error: ``reason: detail`` when the event failed; None otherwise.
    """

    outcome: str | None
    chunks: int | None
    model_version: str | None
    error: str | None


_SKIPPED = IndexResult(None, None, None, None)


class DocumentIndexer(IndexClient):
    """Writes parsed events to the index; ``open``/``close`` come from :class:`IndexClient`.

    Args:
        config: The job's config (sections ``embedding``, ``model``, ``rag``).
        index_factory: Builds the index; default: :func:`flinkai.rag.open_index`.
        guard: Turns a row's unexpected exception into an ``internal_error`` row.
    """

    def __init__(
        self,
        config: Config,
        index_factory: Callable[[Config], VectorIndex] | None = None,
        guard: RowGuard | None = None,
    ) -> None:
        super().__init__(config, index_factory)
        self._guard = guard or RowGuard("index_document")

    def apply(self, events: Sequence[DocEvent | None]) -> list[IndexResult]:
        """Write a batch of events in order; None (an invalid event) is skipped.

        The batch goes to the index as one ``apply`` call (the index resolves
        several versions of one document inside it in order). When the index
        rejects the batch as breaking its contract, each event is written alone so
        only the bad one fails.

        Raises:
            IndexUnavailableError: The index stayed unreachable over
                ``WRITE_ATTEMPTS`` tries; the task fails and Flink replays.
        """
        embedded = self._embedded_chunks(events)
        results: list[IndexResult] = [_SKIPPED] * len(events)
        ops: list[tuple[int, Operation, int, str | None]] = []  # (event index, op, chunks, model)
        for i, event in enumerate(events):
            if event is None:
                continue
            if event.op is DocOp.DELETE:
                ops.append((i, DeleteDocument(event.doc_id, event.version), 0, None))
                continue
            entry = embedded[i]
            if isinstance(entry, str):  # the model failed on this document
                results[i] = IndexResult(None, None, None, entry)
                continue
            chunks, model_version = entry if entry is not None else ([], None)
            op = UpsertDocument(event.doc_id, event.version, tuple(chunks))
            ops.append((i, op, len(chunks), model_version))
        if not ops:
            return results
        try:
            outcomes: list[Outcome | str] = list(self._retrying([op for _, op, _, _ in ops]))
        except IndexUnavailableError:
            raise
        except Exception as e:  # a bad operation (or a bug): find it, write the rest
            if self._guard.policy == "fail":
                raise
            log.warning("index batch of %d raised %s; writing one by one", len(ops), e)
            outcomes = [self._alone(op) for _, op, _, _ in ops]
        for (i, _, n, model_version), outcome in zip(ops, outcomes, strict=True):
            if isinstance(outcome, str):
                results[i] = IndexResult(None, None, None, outcome)
            else:
                results[i] = IndexResult(outcome.name, n, model_version, None)
        return results

    def _alone(self, op: Operation) -> Outcome | str:
        """One operation; a contract breach or a bug becomes this row's error.

        An unreachable index is no row's fault: it must fail the task (Flink
        replays), never become a dead letter, so it bypasses the row guard.
        """
        fatal: list[IndexUnavailableError] = []

        def write(o: Operation) -> Outcome | str:
            try:
                return self._retrying([o])[0]
            except IndexUnavailableError as e:
                fatal.append(e)
                return ""
            except InvalidChunkError as e:
                return f"{Reason.INVALID_FIELD.value}: {e}"

        [result] = self._guard.rows(
            [op],
            write,
            lambda _, e: f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(e)}",
        )
        if fatal:
            raise fatal[0]
        return result

    def _retrying(self, ops: Sequence[Operation]) -> list[Outcome]:
        """``index.apply(ops)``, retried with backoff while the index is unreachable.

        Replaying a batch that failed part-way converges (the contract), so a retry
        is always safe.
        """
        pause = RETRY_PAUSE_S
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return self.index.apply(ops)
            except IndexUnavailableError as e:
                if attempt == WRITE_ATTEMPTS:
                    raise
                log.warning("index write failed (attempt %d): %s; retrying", attempt, e)
                time.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")

    def _embedded_chunks(
        self, events: Sequence[DocEvent | None]
    ) -> list[tuple[list[Chunk], str] | str | None]:
        """Per event: (chunks with vectors, model version), an error, or None (no upsert)."""
        pieces: list[tuple[int, str, str]] = []  # (event index, chunk id, text)
        out: list[tuple[list[Chunk], str] | str | None] = [None] * len(events)
        upserts = [(i, e) for i, e in enumerate(events) if e is not None and e.op is DocOp.UPSERT]

        def split(item: tuple[int, DocEvent]) -> list[tuple[str, str]] | str:
            _, event = item
            try:
                return chunk_document(event.doc_id, event.text or "", self.config.rag)
            except TooManyChunksError as e:
                return f"{Reason.OVERSIZED_TEXT.value}: {e}"

        split_rows = self._guard.rows(
            upserts,
            split,
            lambda _, e: f"{Reason.INTERNAL_ERROR.value}: {internal_error_detail(e)}",
        )
        for (i, _), split_row in zip(upserts, split_rows, strict=True):
            if isinstance(split_row, str):
                out[i] = split_row
            elif not split_row:
                out[i] = f"{Reason.EMPTY_TEXT.value}: the document has no words to index"
            else:
                pieces += [(i, cid, text) for cid, text in split_row]
        if not pieces:
            return out
        result = self._embed([text for _, _, text in pieces])
        for (i, chunk_id, text), vector, error in zip(
            pieces, result.embeddings, result.errors, strict=True
        ):
            event = events[i]
            assert event is not None
            if isinstance(out[i], str):
                continue
            if error is not None or vector is None:
                out[i] = error or f"{Reason.INFERENCE_FAILED.value}: no vector"
                continue
            v = np.asarray(vector, dtype=np.float32)
            entry = out[i]
            if entry is None:
                entry = ([], result.model_version)
                out[i] = entry
            assert isinstance(entry, tuple)
            entry[0].append(Chunk(event.doc_id, chunk_id, text, v))
        return out
