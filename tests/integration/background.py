"""A test's reference computed beside the job it checks, on whatever CPU the job leaves idle.

Some fault tests compare the job's output with a reference computed in the test
(single-sequence greedy decoding, a training replay). The reference needs neither the
job nor its output, yet computed before or after the job it took from 16 s (the
fine-tuning replay) to 70 s (greedy decoding of 450 prompts, on a loaded machine) in
which nothing else ran. :func:`beside` runs it in a child process at the lowest CPU
priority while the job runs: it gets the cores only while the job leaves them idle
(start-up, checkpoints waited for, a restart's delay), so the job's own timing, which
the kill windows depend on, is barely touched.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.pool import AsyncResult
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["beside"]


def _lowest_priority() -> None:
    os.nice(19)


@contextmanager
def beside(fn: Callable[..., T], *args: Any) -> Iterator[AsyncResult[T]]:
    """Start ``fn(*args)`` in a child process at niceness 19; yield its pending result.

    ``fn`` must be importable by name (a module-level function), its arguments and
    result picklable. The child is a fresh interpreter (``spawn``): nothing of the
    test process's threads, JVM gateway or sockets is shared. Leaving the block ends
    the child whether or not its result was taken.
    """
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(1, initializer=_lowest_priority)
    try:
        yield pool.apply_async(fn, args)
    finally:
        pool.terminate()
        pool.join()
