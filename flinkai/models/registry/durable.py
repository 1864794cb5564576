"""Durable file writes: data and directory entries that survive a crash once written.

A publish is only atomic if every byte and every directory entry is on disk before the
rename that makes it visible; these helpers do the fsyncs that guarantee it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from flinkai.staging import fsync_dir

__all__ = ["CHUNK_BYTES", "chunks", "fsync_dir", "makedirs_durable", "sha256_file", "write_durable"]

#: Read and write unit for model files (1 MiB).
CHUNK_BYTES = 1 << 20


def chunks(src: Path | bytes) -> Iterator[bytes]:
    if isinstance(src, bytes):
        view = memoryview(src)
        for start in range(0, max(len(src), 1), CHUNK_BYTES):
            yield bytes(view[start : start + CHUNK_BYTES])
        return
    with src.open("rb") as f:
        first = True
        while (chunk := f.read(CHUNK_BYTES)) or first:
            first = False
            yield chunk


def write_durable(path: Path, data: bytes) -> None:
    with path.open("xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def makedirs_durable(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every folder it creates."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # created concurrently by another publisher
        fsync_dir(folder.parent)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()
