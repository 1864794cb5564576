"""IndexClient: the open/close pair DocumentIndexer and Retriever share."""

from __future__ import annotations

import pytest

from flinkai.config import load_config
from flinkai.functions.rag_index import DocumentIndexer
from flinkai.functions.retrieve import Retriever
from flinkai.rag.memory import MemoryIndex


@pytest.mark.parametrize("cls", [DocumentIndexer, Retriever])
def test_used_before_open_names_the_class_and_builds_no_index(cls: type) -> None:
    built: list[MemoryIndex] = []
    client = cls(load_config(env={}), index_factory=lambda _: built.append(MemoryIndex()))
    with pytest.raises(RuntimeError, match=rf"^{cls.__name__} used before open\(\)$"):
        _ = client.index
    assert built == []  # the index is built in open(), not before
