"""The embedding backend and the vector-index client that the RAG functions hold.

:class:`~flinkai.functions.rag_index.DocumentIndexer` (writes) and
:class:`~flinkai.functions.retrieve.Retriever` (queries) both embed text with the
model behind ``text_to_vector`` and talk to the index ``config.rag`` names; this is
their shared open/close pair.
"""

from __future__ import annotations

from collections.abc import Callable

from flinkai.config import Config
from flinkai.functions.embedding import EmbeddingFunction
from flinkai.rag import open_index
from flinkai.rag.index import VectorIndex

__all__ = ["IndexClient"]


class IndexClient:
    """Holds the embedding backend and the index client between ``open`` and ``close``.

    Args:
        config: The job's config (sections ``embedding``, ``model``, ``rag``).
        index_factory: Builds the index; default: :func:`flinkai.rag.open_index`.
    """

    def __init__(
        self, config: Config, index_factory: Callable[[Config], VectorIndex] | None = None
    ) -> None:
        self.config = config
        self._factory = index_factory or open_index
        self._embed = EmbeddingFunction(config)
        self._index: VectorIndex | None = None

    def open(self) -> None:
        self._embed.open()
        if self._index is None:
            self._index = self._factory(self.config)

    def close(self) -> None:
        self._embed.close()
        if self._index is not None:
            self._index.close()
            self._index = None

    @property
    def index(self) -> VectorIndex:
        """The open index; a RuntimeError naming the subclass before ``open()``."""
        if self._index is None:
            raise RuntimeError(f"{type(self).__name__} used before open()")
        return self._index
