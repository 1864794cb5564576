"""The scheduler's calls into the prefix store, off its stepping thread.

A Kafka store's write is a transaction (encode, compress, send, commit): writing a
session's KV took up to 1.3 s on loopback, and a restore fetches and verifies blocks.
Made on the stepping thread, each of those stalled every running sequence for as
long. Here they run on one thread of their own and the stepping thread only polls a
lookup's future.

Order: a lookup goes ahead of the queued writes, except those that write one of its
blocks (a session offloaded, then its next turn): it runs after them, so it finds
what they wrote. A prompt's first token waits for its lookup, while a write delays
nobody.

Memory: KV handed to a write stays in memory until the write ends. A write the caller
*holds* counts in :attr:`PrefixIo.pending_bytes`, and the scheduler counts that as
KV it holds (its gauge and its budget). A *clean-ahead* write (a finished turn's
session KV, still resident and counted as such) is not counted until the caller
drops the KV and calls :meth:`PrefixIo.hold`: evicting it is then free once written.

The thread runs at normal priority, unlike the prefill's: a write is mostly a wait for
the broker's commit, and a lookup behind a starved write would hold up a first token.

``threaded=False`` makes every call inline (lookups return a done future): the plain,
deterministic mode unit tests step by hand.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flinkai.llm.cache import KvCache
from flinkai.llm.prefix import PrefixCache, Restored, block_hashes

__all__ = ["PrefixIo", "Write"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Write:
    """A queued write of KV blocks (see :meth:`PrefixIo.write`)."""

    blocks: frozenset[str]
    size: int
    held: bool
    done: bool = False


@dataclass(eq=False)
class _Job:
    run: Callable[[], Any]
    future: concurrent.futures.Future[Any]
    blocks: frozenset[str]
    write: Write | None = None  # None: a lookup


class PrefixIo:
    """Writes and lookups of one :class:`PrefixCache`.

    The caches handed to :meth:`write` must not change afterwards; the scheduler's are
    prefill outputs and copies extracted from the batch, never written again.
    """

    def __init__(self, prefix: PrefixCache, threaded: bool) -> None:
        self.prefix = prefix
        self.threaded = threaded and prefix.store is not None
        self._cond = threading.Condition()
        self._jobs: list[_Job] = []
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._busy = False  # the thread runs a job
        self._closed = False

    @property
    def pending_bytes(self) -> int:
        """KV bytes of the held writes queued or in progress."""
        return self._pending

    def write(
        self,
        token_ids: Sequence[int],
        cache: KvCache,
        first_block: int = 0,
        namespace: str = "",
        *,
        held: bool = True,
    ) -> Write | None:
        """Write the full blocks of ``token_ids`` from ``first_block`` on (see
        :meth:`PrefixCache.publish`; a store error is counted there, never raised).

        Args:
            held: The caller drops ``cache`` now: its bytes count as pending until the
                write ends. False: the caller keeps it (and counts it) for now.

        Returns:
            The queued write (for :meth:`hold`); None when written inline or nothing
            was left to write.
        """
        bt = self.prefix.block_tokens
        full = min(len(token_ids), cache.seq_len) // bt
        if not self.threaded or full <= first_block or not self.prefix.publish_enabled:
            self.prefix.publish(token_ids, cache, first_block, namespace)
            return None
        ids = tuple(token_ids[: full * bt])
        blocks = frozenset(block_hashes(ids, bt, namespace)[first_block:])
        w = Write(blocks, cache.nbytes, held)
        run = functools.partial(self.prefix.publish, ids, cache, first_block, namespace)
        with self._cond:
            if held:
                self._pending += w.size
            self._queue(_Job(run, concurrent.futures.Future(), blocks, w))
        return w

    def hold(self, w: Write | None) -> None:
        """The caller drops the KV of clean-ahead write ``w``: count it until written."""
        with self._cond:
            if w is not None and not w.done and not w.held:
                w.held = True
                self._pending += w.size

    def lookup(
        self, token_ids: Sequence[int], namespace: str = ""
    ) -> concurrent.futures.Future[Restored]:
        """The longest stored prefix of ``token_ids``, after the queued writes of its
        blocks."""
        if not self.threaded:
            done: concurrent.futures.Future[Restored] = concurrent.futures.Future()
            done.set_result(self.prefix.lookup(token_ids, namespace))
            return done
        ids = tuple(token_ids)
        usable = max(0, len(ids) - 1) // self.prefix.block_tokens
        blocks = frozenset(block_hashes(ids[: usable * self.prefix.block_tokens],
                                        self.prefix.block_tokens, namespace))  # fmt: skip
        job = _Job(
            functools.partial(self.prefix.lookup, ids, namespace),
            concurrent.futures.Future(),
            blocks,
        )
        with self._cond:
            self._queue(job)
        return job.future

    def drain(self) -> None:
        """Wait until every held write has ended."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0 or self._closed)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every call queued so far has ended; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._jobs or self._busy), timeout_s)

    def close(self) -> None:
        """Finish the call in progress; queued ones are dropped (the KV they held is
        recomputed if it is ever needed; a dropped lookup's future is cancelled)."""
        with self._cond:
            self._closed = True
            for job in self._jobs:
                job.future.cancel()
                self._ended(job)
            self._jobs.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(30.0)
            self._thread = None

    # -- the store's thread ------------------------------------------------------------

    def _queue(self, job: _Job) -> None:
        # under self._cond
        if self._closed:
            job.future.cancel()
            self._ended(job)
            return
        self._jobs.append(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="flinkai-llm-store")
            self._thread.daemon = True
            self._thread.start()
        self._cond.notify_all()

    def _next(self) -> _Job:
        # under self._cond, with a job queued: the first lookup no queued write feeds
        writing: set[str] = set()
        for i, job in enumerate(self._jobs):
            if job.write is None and not (job.blocks & writing):
                return self._jobs.pop(i)
            if job.write is not None:
                writing |= job.blocks
        return self._jobs.pop(0)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._jobs or self._closed)
                if self._closed:
                    return
                job = self._next()
                self._busy = True
            if job.future.set_running_or_notify_cancel():
                try:
                    job.future.set_result(job.run())
                except Exception as e:  # a bug: the lookup's caller sees it, a write logs it
                    job.future.set_exception(e)
                    if job.write is not None:
                        log.exception("prefix write failed")
            with self._cond:
                self._ended(job)
                self._busy = False
                self._cond.notify_all()

    def _ended(self, job: _Job) -> None:
        # under self._cond
        w = job.write
        if w is not None and not w.done:
            w.done = True
            if w.held:
                self._pending -= w.size
