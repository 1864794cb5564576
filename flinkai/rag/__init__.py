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
