"""StreamRAG's vector index: versioned documents of chunks, searched by cosine.

- :mod:`.index` — the ``VectorIndex`` contract (``Chunk``, ``Hit``, ``Outcome``,
  ``UpsertDocument``, ``DeleteDocument``) and its version guard.
- :mod:`.memory` — exact in-process implementation (tests, recall baseline).
- :mod:`.chroma` — the Chroma server implementation (HTTP client).
- :mod:`.server` — a local Chroma server (``flinkai chroma start|stop|status``).
- :mod:`.chunking` — deterministic word-window chunks with ids ``doc_id#n``.
- :mod:`.recall` — recall@k of an index against exact search.

Nothing here imports ``chromadb`` at package import; :mod:`.chroma` does, lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flinkai.config import Config, RagConfig

if TYPE_CHECKING:
    from flinkai.rag.index import VectorIndex

__all__ = ["open_index"]


def open_index(config: Config | RagConfig) -> VectorIndex:
    """The configured vector index: a :class:`~flinkai.rag.chroma.ChromaIndex`.

    Args:
        config: The whole config, or its ``rag`` section.

    Raises:
        IndexUnavailableError: The server does not answer.
    """
    from flinkai.rag.chroma import ChromaIndex

    rag = config.rag if isinstance(config, Config) else config
    return ChromaIndex(rag)
