"""The model registry itself: publish, resolve, list, roll back (see the package docs)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from flinkai.config import RegistryConfig
from flinkai.errors import FlinkAIError
from flinkai.models.artifacts import MANIFEST_FILE, read_manifest
from flinkai.models.registry.durable import chunks as _chunks
from flinkai.models.registry.durable import makedirs_durable as _makedirs_durable
from flinkai.models.registry.durable import sha256_file as _sha256
from flinkai.models.registry.durable import write_durable as _write_durable
from flinkai.models.registry.errors import (
    CorruptVersionError,
    ModelNotPublishedError,
    RegistryError,
    RegistryLockTimeoutError,
    VersionConflictError,
)
from flinkai.models.registry.manifest import (
    POINTER_FILE,
    REGISTRY_MANIFEST,
    Pointer,
    PublishedModel,
    RegistryFile,
    VersionInfo,
    VersionManifest,
)
from flinkai.paths import cache_root
from flinkai.staging import staged_dir, staged_file

__all__ = [
    "CRASH_POINTS",
    "ModelRegistry",
    "VerifyMode",
    "default_registry_root",
    "registry_root",
]

log = logging.getLogger(__name__)

VERSIONS_DIR = "versions"
LOCK_FILE = ".lock"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"

#: Named steps of :meth:`ModelRegistry.publish` at which the ``crash_at`` hook is called,
#: in order. ``mid_write`` and ``after_write`` are called once per file.
CRASH_POINTS = (
    "mid_write",  # the first chunk of a file is written and flushed: a partial file
    "after_write",  # a file is written and flushed, not yet fsynced
    "before_fsync",  # every file and the manifest are written; directories not fsynced
    "before_rename",  # the temp folder is durable, not yet renamed to versions/<version>
    "before_pointer_swap",  # versions/<version> is in place and durable; CURRENT untouched
    "before_pointer_rename",  # CURRENT.tmp is written and fsynced, not yet renamed
    "after_pointer_swap",  # CURRENT replaced; its directory not yet fsynced
)

#: How readers check a version's files against its manifest:
#: ``always`` hashes every file on every load; ``once`` hashes on the first load by this
#: registry object, then compares a stat fingerprint (size, mtime, inode) and hashes again
#: only if it changed; ``size`` compares sizes only (catches truncation, not bit flips).
VerifyMode = Literal["always", "once", "size"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
_LOCK_POLL_S = 0.05


Source = Path | str | Mapping[str, Path | str | bytes]
Progress = Callable[[str], None]


def default_registry_root() -> Path:
    """``$FLINKAI_HOME/registry``."""
    return cache_root() / "registry"


def registry_root(config: RegistryConfig) -> Path:
    """``config.root``, or ``$FLINKAI_HOME/registry`` when it is empty."""
    return Path(config.root).expanduser() if config.root else default_registry_root()


# -- errors -------------------------------------------------------------------------------


class ModelRegistry:
    """Publishes model versions atomically and resolves the current one.

    Writers (:meth:`publish`, :meth:`rollback`) serialise on an exclusive ``flock`` per
    model name, across threads and processes. Readers (:meth:`current`, :meth:`load`,
    :meth:`list_versions`) take no lock: versions are immutable once visible and
    ``CURRENT`` is replaced by a rename, so a reader never sees a half-written state.

    Args:
        root: The registry root folder (created on first publish).
        lock_timeout_s: Give up waiting for another publisher after this long; None waits.
        crash_at: Test hook called with each name in :data:`CRASH_POINTS` as publish
            reaches it; fault tests make it kill the process.

    Example:
        >>> registry = ModelRegistry(Path("/srv/models"))  # doctest: +SKIP
        >>> registry.publish("minilm", Path("export/minilm")).version  # doctest: +SKIP
        '3f1c0a9b2e4d'
        >>> registry.current("minilm").path  # doctest: +SKIP
        PosixPath('/srv/models/minilm/versions/3f1c0a9b2e4d')
    """

    def __init__(
        self,
        root: Path | str,
        *,
        lock_timeout_s: float | None = None,
        crash_at: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root).expanduser()
        self.lock_timeout_s = lock_timeout_s
        self._crash_at = crash_at
        # Version folder -> stat fingerprint of a version this object hashed in full.
        self._verified: dict[Path, tuple[Any, ...]] = {}
        self._verified_lock = threading.Lock()

    # -- paths ----------------------------------------------------------------------------

    def model_dir(self, name: str) -> Path:
        return self.root / _check_name(name, "model name")

    def pointer_path(self, name: str) -> Path:
        """``<root>/<name>/CURRENT``; hot-swapping readers stat it to notice publishes."""
        return self.model_dir(name) / POINTER_FILE

    def version_dir(self, name: str, version: str) -> Path:
        return self.model_dir(name) / VERSIONS_DIR / _check_name(version, "version")

    def names(self) -> list[str]:
        """Model names that have a ``CURRENT`` pointer, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.parent.name for p in self.root.glob(f"*/{POINTER_FILE}"))

    # -- readers --------------------------------------------------------------------------

    def read_pointer(self, name: str) -> Pointer:
        """Parse ``CURRENT`` (cheap: one small file, no checksums).

        Raises:
            ModelNotPublishedError: Nothing has been published under ``name``.
            CorruptVersionError: ``CURRENT`` is not a valid pointer.
        """
        path = self.pointer_path(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ModelNotPublishedError(
                f"no version of {name!r} is published in {self.root} "
                f"(run `flinkai registry publish {name} PATH --root {self.root}`)"
            ) from None
        except OSError as e:
            raise CorruptVersionError(path, f"cannot read the pointer: {e}") from e
        try:
            data = json.loads(raw.decode("utf-8"))
            pointer = Pointer(
                name=str(data["name"]),
                version=_check_name(str(data["version"]), "version"),
                sequence=int(data["sequence"]),
                manifest_sha256=str(data["manifest_sha256"]),
                generation=int(data["generation"]),
                published_at=str(data["published_at"]),
            )
        except (UnicodeDecodeError, KeyError, TypeError, ValueError, RegistryError) as e:
            raise CorruptVersionError(path, f"invalid pointer ({type(e).__name__}: {e})") from e
        if pointer.name != name:
            raise CorruptVersionError(path, f"points at model {pointer.name!r}, not {name!r}")
        return pointer

    def current(self, name: str, *, verify: VerifyMode = "once") -> PublishedModel:
        """The serving version of ``name``, checked against its manifest.

        Raises:
            ModelNotPublishedError: Nothing has been published under ``name``.
            CorruptVersionError: The version is missing, partial or corrupted.
        """
        pointer = self.read_pointer(name)
        return self.load(
            name, pointer.version, verify=verify, manifest_sha256=pointer.manifest_sha256
        )

    def load(
        self,
        name: str,
        version: str,
        *,
        verify: VerifyMode = "once",
        manifest_sha256: str | None = None,
    ) -> PublishedModel:
        """A specific version, checked against its manifest.

        Args:
            name: Model name.
            version: Version name.
            verify: How thoroughly files are checked (see :data:`VerifyMode`).
            manifest_sha256: Expected hash of the manifest (from a :class:`Pointer`).

        Raises:
            ModelNotPublishedError: The version folder does not exist.
            CorruptVersionError: The manifest or a file is missing, partial or corrupted.
        """
        folder = self.version_dir(name, version)
        if not folder.is_dir():
            raise ModelNotPublishedError(f"{name}@{version} does not exist in {self.root}")
        manifest_path = folder / REGISTRY_MANIFEST
        try:
            raw = manifest_path.read_bytes()
        except FileNotFoundError:
            raise CorruptVersionError(manifest_path, "manifest is missing") from None
        except OSError as e:
            raise CorruptVersionError(manifest_path, f"cannot read the manifest: {e}") from e
        digest = hashlib.sha256(raw).hexdigest()
        if manifest_sha256 is not None and digest != manifest_sha256:
            raise CorruptVersionError(
                manifest_path,
                f"manifest sha256 {digest[:12]}… != {manifest_sha256[:12]}… in {POINTER_FILE}",
            )
        manifest = VersionManifest.parse(raw, manifest_path)
        if manifest.name != name or manifest.version != version:
            raise CorruptVersionError(
                manifest_path, f"describes {manifest.name}@{manifest.version}, not {name}@{version}"
            )
        self._verify(folder, manifest, digest, verify)
        return PublishedModel(name=name, version=version, path=folder, manifest=manifest)

    def list_versions(self, name: str, *, verify: bool = False) -> list[VersionInfo]:
        """Every complete version of ``name``, oldest first; temp folders are skipped.

        Args:
            name: Model name.
            verify: Hash every file of every version to report corruption.
        """
        versions = self.model_dir(name) / VERSIONS_DIR
        if not versions.is_dir():
            return []
        try:
            current: str | None = self.read_pointer(name).version
        except RegistryError:
            current = None
        rows: list[VersionInfo] = []
        for folder in versions.iterdir():
            if folder.name.startswith(".") or not folder.is_dir():
                continue  # a publish in progress, or crash debris
            is_current = folder.name == current
            try:
                manifest = VersionManifest.parse(
                    (folder / REGISTRY_MANIFEST).read_bytes(), folder / REGISTRY_MANIFEST
                )
            except (OSError, CorruptVersionError) as e:
                rows.append(VersionInfo(folder.name, -1, "", 0, 0, is_current, str(e)))
                continue
            problem = None
            if verify:
                try:
                    self.load(name, folder.name, verify="always")
                except RegistryError as e:
                    problem = str(e)
            rows.append(
                VersionInfo(
                    folder.name,
                    manifest.sequence,
                    manifest.created_at,
                    len(manifest.files),
                    manifest.size_bytes,
                    is_current,
                    problem,
                )
            )
        return sorted(rows, key=lambda r: (r.sequence, r.version))

    # -- writers --------------------------------------------------------------------------

    def publish(
        self,
        name: str,
        source: Source,
        *,
        version: str | None = None,
        metadata: Mapping[str, str] | None = None,
        check_artifacts: bool = True,
        progress: Progress | None = None,
    ) -> PublishedModel:
        """Publish a new version of ``name`` and make it current, atomically.

        Args:
            name: Model name in the registry.
            source: A model folder (every file under it), one file (published under its
                own name, e.g. LoRA adapter weights), or a mapping of relative path to a
                source file or bytes.
            version: Version name. By default: for an exported model (``manifest.json``
                from ``flinkai model export``), its manifest's version; otherwise the
                first 12 hex digits of a hash over every file's path and sha256. Either
                way the same content gets the same version.
            metadata: Strings stored in the version's manifest.
            check_artifacts: If the source holds an exported model's ``manifest.json``,
                check the copied files against it and refuse a partial or corrupt model.
            progress: Called with one line per step.

        Returns:
            The published, now current, version. Publishing content that already
            exists under that version re-points ``CURRENT`` at it without copying.

        Raises:
            RegistryError: The source is empty, unreadable or not a valid model.
            VersionConflictError: ``version`` exists with different content.
            RegistryLockTimeoutError: Another publisher held the lock too long.
        """
        say = progress or log.info
        entries = _plan(source)
        model_dir = self.model_dir(name)
        versions = model_dir / VERSIONS_DIR
        if version is not None:
            _check_name(version, "version")
        _makedirs_durable(versions)
        with self._locked(name, say):
            self._clean_debris(name)
            reused: PublishedModel | None = None
            # The staging folder is versions/.tmp-*: _clean_debris removes a crash's leftover.
            with staged_dir(
                parent=versions,
                prefix=TMP_PREFIX,
                replace=False,
                before_rename=lambda: self._crash("before_rename"),
            ) as stage:
                tmp = stage.path
                files = self._write_files(tmp, entries, say)
                exported = _check_artifact_manifest(tmp, files) if check_artifacts else None
                # An exported model keeps its own version, so rows are stamped alike with
                # or without the registry.
                version = _check_name(version or exported or _content_version(files), "version")
                target = versions / version
                if target.exists():
                    reused = self._reuse_existing(name, version, files, say)
                if reused is not None:
                    stage.discard()
                else:
                    manifest = VersionManifest(
                        name=name,
                        version=version,
                        sequence=self._next_sequence(name),
                        created_at=_now(),
                        files=files,
                        metadata=dict(metadata or {}),
                    )
                    _write_durable(tmp / REGISTRY_MANIFEST, manifest.to_json().encode("utf-8"))
                    self._crash("before_fsync")
                    # On the way out: every file and folder fsynced, the rename, and
                    # versions/ fsynced (CURRENT must not point at a folder that could
                    # vanish on power loss).
                    stage.target = target
            if reused is not None:
                self._swap_pointer(name, reused)
                say(f"{reused.model_version} already published; now current")
                return reused
            self._crash("before_pointer_swap")
            published = PublishedModel(name, version, target, manifest)
            self._swap_pointer(name, published)
        say(
            f"published {published.model_version} (sequence {manifest.sequence}, "
            f"{len(files)} file{'s' if len(files) != 1 else ''}, {_human(manifest.size_bytes)})"
        )
        return published

    def rollback(
        self, name: str, version: str, *, progress: Progress | None = None
    ) -> PublishedModel:
        """Make an existing version current again, after checking every file.

        Raises:
            ModelNotPublishedError: ``version`` does not exist.
            CorruptVersionError: ``version`` is damaged; ``CURRENT`` is left unchanged.
        """
        say = progress or log.info
        with self._locked(name, say):
            published = self.load(name, version, verify="always")
            try:
                if self.read_pointer(name).version == version:
                    say(f"{published.model_version} is already current")
                    return published
            except RegistryError as e:
                say(f"replacing an unusable pointer ({e})")
            self._swap_pointer(name, published)
        say(f"rolled back to {published.model_version} (sequence {published.sequence})")
        return published

    # -- internals ------------------------------------------------------------------------

    def _crash(self, step: str) -> None:
        if self._crash_at is not None:
            self._crash_at(step)

    @contextmanager
    def _locked(self, name: str, say: Progress) -> Iterator[None]:
        model_dir = self.model_dir(name)
        _makedirs_durable(model_dir)
        fd = os.open(model_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"waiting for the publish lock on {name!r} ({_lock_holder(fd)})")
                self._wait_for_lock(fd, name)
            # For the "held by" message of the next waiter; readers never look at it.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _wait_for_lock(self, fd: int, name: str) -> None:
        if self.lock_timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RegistryLockTimeoutError(
                        f"gave up after {self.lock_timeout_s:g}s waiting for the publish lock "
                        f"on {name!r} ({_lock_holder(fd)})"
                    ) from None
                time.sleep(_LOCK_POLL_S)

    def _clean_debris(self, name: str) -> None:
        """Remove temp folders and files of crashed publishes (called under the lock)."""
        model_dir = self.model_dir(name)
        for path in (model_dir / VERSIONS_DIR).iterdir():
            if path.name.startswith((TMP_PREFIX, TRASH_PREFIX)):
                log.info("removing %s left by an interrupted publish", path)
                shutil.rmtree(path, ignore_errors=True)
        (model_dir / f"{POINTER_FILE}.tmp").unlink(missing_ok=True)

    def _write_files(
        self, tmp: Path, entries: list[tuple[str, Path | bytes]], say: Progress
    ) -> tuple[RegistryFile, ...]:
        written: dict[tuple[int, int], tuple[str, RegistryFile]] = {}
        files: list[RegistryFile] = []
        total = len(entries)
        for i, (rel, src) in enumerate(entries, 1):
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)  # fsynced once the tree is complete
            if isinstance(src, Path):
                st = src.stat()
                key = (st.st_dev, st.st_ino)
                if key in written:
                    # Keep hard links as links (the exporter links the Triton copy of the model).
                    first_rel, first = written[key]
                    os.link(tmp / first_rel, dest)
                    files.append(RegistryFile(rel, first.sha256, first.size))
                    say(f"[{i}/{total}] {rel} (hard link to {first_rel})")
                    continue
                entry = self._copy(src, dest, rel)
                written[key] = (rel, entry)
            else:
                entry = self._copy(src, dest, rel)
            files.append(entry)
            say(f"[{i}/{total}] {rel} ({_human(entry.size)})")
        return tuple(sorted(files, key=lambda f: f.path))

    def _copy(self, src: Path | bytes, dest: Path, rel: str) -> RegistryFile:
        """Copy while hashing the bytes written, so the manifest describes the copy."""
        h = hashlib.sha256()
        size = 0
        with dest.open("xb") as out:
            for n, chunk in enumerate(_chunks(src)):
                out.write(chunk)
                h.update(chunk)
                size += len(chunk)
                if n == 0:
                    out.flush()
                    self._crash("mid_write")
            out.flush()
            self._crash("after_write")
            # Data first: a rename may reach the disk before unsynced data does.
            os.fsync(out.fileno())
        return RegistryFile(rel, h.hexdigest(), size)

    def _reuse_existing(
        self, name: str, version: str, files: tuple[RegistryFile, ...], say: Progress
    ) -> PublishedModel | None:
        """The existing version if it has the same files; None after moving a damaged one away."""
        try:
            existing = self.load(name, version, verify="always")
        except RegistryError as e:
            # A damaged folder under the name we need (disk fault, manual edit): replace it.
            trash = self.model_dir(name) / VERSIONS_DIR / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
            say(f"replacing damaged {name}@{version} ({e})")
            os.rename(self.version_dir(name, version), trash)
            shutil.rmtree(trash, ignore_errors=True)
            return None
        if existing.manifest.files != files:
            raise VersionConflictError(
                f"{name}@{version} already exists with different content; versions are "
                "immutable, publish under another version name"
            )
        return existing

    def _next_sequence(self, name: str) -> int:
        """One more than any sequence seen in manifests or the pointer (under the lock)."""
        highest = 0
        # No pointer yet, or a damaged one: the manifests decide.
        with contextlib.suppress(RegistryError):
            highest = self.read_pointer(name).sequence
        for manifest_path in (self.model_dir(name) / VERSIONS_DIR).glob(f"*/{REGISTRY_MANIFEST}"):
            if manifest_path.parent.name.startswith("."):
                continue
            try:
                raw = manifest_path.read_bytes()
                highest = max(highest, VersionManifest.parse(raw, manifest_path).sequence)
            except (OSError, CorruptVersionError) as e:
                log.warning("ignoring %s when numbering versions: %s", manifest_path, e)
        return highest + 1

    def _swap_pointer(self, name: str, published: PublishedModel) -> None:
        """Replace ``CURRENT`` atomically (called under the lock)."""
        model_dir = self.model_dir(name)
        try:
            generation = self.read_pointer(name).generation + 1
        except ModelNotPublishedError:
            generation = 1
        except CorruptVersionError as e:
            log.warning("overwriting an unreadable pointer: %s", e)
            generation = 1
        raw = (published.path / REGISTRY_MANIFEST).read_bytes()
        pointer = Pointer(
            name=name,
            version=published.version,
            sequence=published.sequence,
            manifest_sha256=hashlib.sha256(raw).hexdigest(),
            generation=generation,
            published_at=_now(),
        )
        # A fixed staging name, so _clean_debris finds a crash's leftover. The parent is
        # fsynced after the rename: power loss cannot bring back the old CURRENT after
        # callers were told.
        with staged_file(
            model_dir / POINTER_FILE,
            name=f"{POINTER_FILE}.tmp",
            before_rename=lambda: self._crash("before_pointer_rename"),
        ) as stage:
            stage.path.unlink(missing_ok=True)
            _write_durable(stage.path, pointer.to_json().encode("utf-8"))
        self._crash("after_pointer_swap")

    def _verify(
        self, folder: Path, manifest: VersionManifest, digest: str, mode: VerifyMode
    ) -> None:
        stats: dict[str, os.stat_result] = {}
        for entry in manifest.files:
            path = folder / entry.path
            try:
                st = path.stat()
            except FileNotFoundError:
                raise CorruptVersionError(path, "listed in the manifest but missing") from None
            except OSError as e:
                raise CorruptVersionError(path, f"cannot stat: {e}") from e
            if st.st_size != entry.size:
                raise CorruptVersionError(
                    path, f"size {st.st_size} != {entry.size} in the manifest (partial file?)"
                )
            stats[entry.path] = st
        if mode == "size":
            return
        fingerprint = (
            digest,
            tuple((p, s.st_size, s.st_mtime_ns, s.st_ino) for p, s in sorted(stats.items())),
        )
        if mode == "once":
            with self._verified_lock:
                if self._verified.get(folder) == fingerprint:
                    return
        seen: dict[tuple[int, int], str] = {}
        for entry in manifest.files:
            st = stats[entry.path]
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                try:
                    seen[key] = _sha256(folder / entry.path)
                except OSError as e:
                    raise CorruptVersionError(folder / entry.path, f"cannot read: {e}") from e
            if seen[key] != entry.sha256:
                raise CorruptVersionError(
                    folder / entry.path,
                    f"sha256 {seen[key][:12]}… != {entry.sha256[:12]}… in the manifest",
                )
        with self._verified_lock:
            self._verified[folder] = fingerprint


# -- helpers ------------------------------------------------------------------------------


def _check_name(value: str, what: str) -> str:
    if not _NAME_RE.match(value):
        raise RegistryError(
            f"invalid {what} {value!r}: use letters, digits and . _ @ + - "
            "(at most 128, not starting with a dot)"
        )
    return value


def _plan(source: Source) -> list[tuple[str, Path | bytes]]:
    """Relative destination path and source of every file to publish, sorted."""
    if isinstance(source, Mapping):
        entries: list[tuple[str, Path | bytes]] = []
        for rel, src in source.items():
            p = PurePosixPath(rel)
            if rel == REGISTRY_MANIFEST:
                raise RegistryError(f"{rel!r} is a reserved file name in the registry")
            if not rel or p.is_absolute() or ".." in p.parts or str(p) != rel:
                raise RegistryError(f"invalid file path {rel!r}: use a relative POSIX path")
            entries.append((rel, src if isinstance(src, bytes) else Path(src).expanduser()))
    else:
        path = Path(source).expanduser()
        if path.is_file():
            entries = [(path.name, path)]
        elif path.is_dir():
            # A registry manifest at the top (publishing a copy of a version) is rewritten.
            entries = [
                (p.relative_to(path).as_posix(), p)
                for p in path.rglob("*")
                if p.is_file() and p != path / REGISTRY_MANIFEST
            ]
        else:
            raise RegistryError(f"{path}: no such file or folder to publish")
    if not entries:
        raise RegistryError(f"nothing to publish: {source} holds no files")
    for rel, src in entries:
        if rel == REGISTRY_MANIFEST:
            raise RegistryError(f"{rel!r} is a reserved file name in the registry")
        if isinstance(src, Path) and not src.is_file():
            raise RegistryError(f"{src}: not a readable file")
    return sorted(entries, key=lambda e: e[0])


def _check_artifact_manifest(tmp: Path, files: tuple[RegistryFile, ...]) -> str | None:
    """Refuse an exported model whose files do not match its own ``manifest.json``.

    Returns:
        The exported model's version, or None when ``tmp`` holds no exported model.
    """
    if not (tmp / MANIFEST_FILE).is_file():
        return None
    try:
        artifact = read_manifest(tmp)
    except FlinkAIError as e:
        raise RegistryError(f"refusing to publish: {e}") from e
    copied = {f.path: f for f in files}
    for entry in artifact.files:
        got = copied.get(entry.path)
        if got is None:
            raise RegistryError(f"refusing to publish a partial model: {entry.path} is missing")
        if (got.size, got.sha256) != (entry.size, entry.sha256):
            raise RegistryError(
                f"refusing to publish a corrupt model: {entry.path} does not match "
                f"{MANIFEST_FILE} (size {got.size} vs {entry.size}, "
                f"sha256 {got.sha256[:12]}… vs {entry.sha256[:12]}…)"
            )
    return artifact.version


def _content_version(files: tuple[RegistryFile, ...]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.path}\0{f.sha256}\n".encode())
    return h.hexdigest()[:12]


def _lock_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"held by pid {pid}" if pid.isdigit() else "holder unknown"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
