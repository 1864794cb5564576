"""``retrieve(query_text, k)``: the top-k passages of the live index for a text.

The query is embedded with the project's embedding path (the model behind
``text_to_vector``, so queries and indexed chunks share one vector space) and
searched in the index that ``jobs/rag_ingest.sql`` maintains. An empty index, a
NULL or blank query and ``k <= 0`` give an empty list, not an error. When the query
cannot be embedded, :meth:`Retriever.__call__` returns None and the answer job
dead-letters the question.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flinkai.config import Config
from flinkai.functions.index_client import IndexClient
from flinkai.rag.index import Hit, VectorIndex

__all__ = ["MAX_K", "Retriever"]

#: Upper bound on k: a SQL typo (k = 100000) must not turn into a huge index scan.
MAX_K = 100


class Retriever(IndexClient):
    """Queries the index; ``open``/``close`` come from :class:`IndexClient`.

    Args:
        config: The job's config (sections ``embedding``, ``model``, ``rag``).
        index_factory: Builds the index; default: the Chroma collection ``config.rag`` names.
    """

    def __init__(
        self, config: Config, index_factory: Callable[[Config], VectorIndex] | None = None
    ) -> None:
        super().__init__(config, index_factory)
        #: Why the last query returned None (for the dead-letter detail).
        self.last_error: str | None = None

    def __call__(self, query_text: str | None, k: int | None) -> list[Hit] | None:
        """The top-k hits, best first; None when the query could not be embedded."""
        index = self.index  # raises before open()
        self.last_error = None
        if k is None:
            k = self.config.rag.k
        k = min(int(k), MAX_K)
        if query_text is None or not query_text.strip() or k <= 0:
            return []
        result = self._embed([query_text])
        vector, error = result.embeddings[0], result.errors[0]
        if error is not None or vector is None:
            self.last_error = error or "inference_failed: no vector"
            return None
        v = np.asarray(vector, dtype=np.float32)
        return index.query(v / max(float(np.linalg.norm(v)), 1e-12), k)
