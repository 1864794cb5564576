"""Staged publish: build a folder or file beside its target, then rename it into place.

Readers see the old target or the new one, never a half-written one. The content is
written under a hidden name in the target's own folder (the same file system, so the
rename is atomic), fsynced (files, then folders deepest first), renamed, and the
parent folder is fsynced so the rename itself survives a power loss. An exception in
the ``with`` block, or a failed rename, removes the staging path and leaves the old
target as it was.

``staged_dir`` replaces an existing folder by moving it aside first (a folder cannot
be renamed over a non-empty one), restoring it if the rename fails, then deleting it.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from flinkai.errors import FlinkAIError

__all__ = ["Stage", "StagingError", "fsync_dir", "fsync_tree", "staged_dir", "staged_file"]


class StagingError(FlinkAIError):
    """The staged content could not be renamed into place; the old target is intact."""


@dataclass
class Stage:
    """Where to write, and where it goes.

    Attributes:
        path: The staging folder or file; write here.
        target: Where ``path`` is renamed to when the block ends. It may be set or
            changed inside the block (a version named after the content, say), but
            must stay in the staging path's folder.
        discarded: :meth:`discard` was called: nothing is published.
    """

    path: Path
    target: Path | None
    discarded: bool = False

    def discard(self) -> None:
        """Publish nothing: the staging path is removed when the block ends."""
        self.discarded = True


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (the names of its files) to disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def fsync_tree(root: Path) -> None:
    """Fsync every file under ``root``, then every folder deepest first, ``root`` last.

    A folder's entries are durable only once the folder itself is fsynced; deepest
    first, so each parent records children that are already on disk.
    """
    folders: list[Path] = []
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        if path.is_dir():
            folders.append(path)
        elif path.is_file():
            _fsync_file(path)
    for folder in sorted(folders, key=lambda p: -len(p.parts)):
        fsync_dir(folder)
    fsync_dir(root)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _final_target(stage: Stage) -> Path:
    if stage.target is None:
        raise ValueError(f"no target was set for the staged {stage.path}")
    if stage.target.parent != stage.path.parent:
        raise ValueError(
            f"the target {stage.target} is not beside its staging path {stage.path} "
            "(the rename would not be atomic)"
        )
    return stage.target


@contextmanager
def staged_dir(
    target: Path | None = None,
    *,
    parent: Path | None = None,
    prefix: str | None = None,
    replace: bool = True,
    mode: int | None = None,
    before_rename: Callable[[], None] | None = None,
) -> Iterator[Stage]:
    """Yield an empty staging folder; on a clean exit, rename it to its target.

    Args:
        target: The folder to publish; its parent is created if missing. Leave it
            out (and give ``parent``) when the name is known only inside the block,
            then set ``stage.target``.
        parent: The folder the target will be in, when ``target`` is not given yet.
        prefix: Start of the staging folder's name (``.<target name>.staging-`` by
            default); a random suffix follows. Leftovers of a crash carry it.
        replace: Replace an existing target (moved aside, deleted after the rename);
            when False, the rename fails if the target exists and is not empty.
        mode: Permission bits of the staging folder (the umask's default when None).
        before_rename: Called after the fsyncs, just before the rename (crash tests
            hook in here); an exception from it publishes nothing.

    Raises:
        StagingError: The rename failed (the old target is back in place).
        ValueError: No target was set, or it is not beside the staging folder.
    """
    folder = _parent_of(target, parent)
    folder.mkdir(parents=True, exist_ok=True)
    name = prefix if prefix is not None else f".{target.name if target else 'new'}.staging-"
    stage = Stage(folder / f"{name}{uuid.uuid4().hex}", target)
    stage.path.mkdir()
    if mode is not None:
        stage.path.chmod(mode)
    try:
        yield stage
        if stage.discarded:
            return
        final = _final_target(stage)
        fsync_tree(stage.path)
        if before_rename is not None:
            before_rename()
        _rename_dir(stage.path, final, replace=replace)
        fsync_dir(folder)
    finally:
        if stage.path.exists():
            _remove(stage.path)


def _rename_dir(path: Path, target: Path, *, replace: bool) -> None:
    old: Path | None = None
    if replace and target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{int(time.time())}")
        os.rename(target, old)
    try:
        os.rename(path, target)
    except OSError as e:
        if old is not None:
            os.rename(old, target)
        raise StagingError(f"cannot move {path.name} into {target}: {e}") from e
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_file(
    target: Path,
    *,
    name: str | None = None,
    before_rename: Callable[[], None] | None = None,
) -> Iterator[Stage]:
    """Yield a staging file path beside ``target``; on a clean exit, replace ``target``.

    The file is not created: the block writes it (``open("xb")`` is safe, the name is
    fresh). On the way out it is fsynced, renamed over ``target`` with
    :func:`os.replace` and the parent folder fsynced.

    Args:
        target: The file to publish; its parent must exist.
        name: The staging file's name (``.<target name>.<random>.tmp`` by default);
            a fixed name lets a later run find and remove a crash's leftover.
        before_rename: Called after the fsync, just before the rename.

    Raises:
        StagingError: The rename failed, or the block wrote no file.
    """
    path = target.with_name(name if name is not None else f".{target.name}.{uuid.uuid4().hex}.tmp")
    stage = Stage(path, target)
    try:
        yield stage
        if stage.discarded:
            return
        if not path.is_file():
            raise StagingError(f"nothing was written to {path} for {target}")
        _fsync_file(path)
        if before_rename is not None:
            before_rename()
        try:
            os.replace(path, target)
        except OSError as e:
            raise StagingError(f"cannot move {path.name} into {target}: {e}") from e
        fsync_dir(target.parent)
    finally:
        if path.exists() or path.is_symlink():
            _remove(path)


def _parent_of(target: Path | None, parent: Path | None) -> Path:
    if target is not None and parent is None:
        return target.parent
    if target is None and parent is not None:
        return parent
    raise ValueError("give exactly one of target and parent")
