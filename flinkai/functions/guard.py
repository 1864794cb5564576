"""Row isolation at the Python UDF boundary.

A Python function that raises fails its Flink task; the task restarts, reads the same
record again and fails again, until the restart budget is spent and the job dies with
nothing committed. One poison record must not do that. Every flinkai UDF therefore
runs its per-row work through :func:`guarded_rows` (or :func:`guarded_batch` for work
done on a whole batch): an unexpected exception on a row becomes that row's error
output, reason ``internal_error`` with the exception's type and message, which the
job routes to its dead-letter topic with the exact payload. It is counted in the
``internal_errors`` metric and logged.

``runtime.udf_errors: fail`` turns this off for users who prefer a failing job to a
dead letter (the exception then propagates and Flink restarts the task).

Errors in the SQL text (a ROW field that does not exist) and failures in ``open()``
(a missing model) are not row errors: they still fail the job, before any row is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

__all__ = ["ErrorPolicy", "RowGuard", "internal_error_detail"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

ErrorPolicy = Literal["dead_letter", "fail"]

#: Longest exception message kept in a dead letter; tracebacks stay in the worker log.
_MAX_DETAIL_CHARS = 1000
#: Full tracebacks logged per worker before only counting (a poison stream must not
#: flood the TaskManager log).
_LOGGED_TRACEBACKS = 20


def internal_error_detail(exc: BaseException) -> str:
    """``Type: message``, bounded, and always valid UTF-8 (Arrow rejects lone surrogates)."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > _MAX_DETAIL_CHARS:
        text = text[:_MAX_DETAIL_CHARS] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class RowGuard:
    """Applies a policy to exceptions raised while processing rows.

    Args:
        function: The SQL function's name, for log lines.
        policy: ``dead_letter`` turns a row's exception into its error output;
            ``fail`` re-raises it.
        count: Called once per row that failed (a metric counter's ``inc``).
    """

    def __init__(
        self,
        function: str,
        policy: ErrorPolicy = "dead_letter",
        count: Callable[[], object] | None = None,
    ) -> None:
        if policy not in ("dead_letter", "fail"):
            raise ValueError(f"udf error policy must be dead_letter or fail, got {policy!r}")
        self.function = function
        self.policy = policy
        self._count = count
        self._logged = 0
        #: Rows this guard turned into errors (also what the metric counts).
        self.errors = 0

    def _failed(self, exc: Exception) -> None:
        if self.policy == "fail":
            raise exc
        self.errors += 1
        if self._count is not None:
            self._count()
        if self._logged < _LOGGED_TRACEBACKS:
            self._logged += 1
            log.error(
                "%s: unexpected %s on a row; it goes to the dead-letter topic as "
                "internal_error (runtime.udf_errors=fail stops the job instead)",
                self.function,
                type(exc).__name__,
                exc_info=exc,
            )

    def rows(
        self, items: Sequence[T], fn: Callable[[T], R], on_error: Callable[[T, Exception], R]
    ) -> list[R]:
        """``[fn(x) for x in items]``, with ``on_error(x, exc)`` for a row that raises."""
        out: list[R] = []
        for item in items:
            try:
                out.append(fn(item))
            except Exception as e:
                self._failed(e)
                out.append(on_error(item, e))
        return out

    def batch(
        self,
        items: Sequence[T],
        fn: Callable[[Sequence[T]], list[R]],
        on_error: Callable[[T, Exception], R],
    ) -> list[R]:
        """``fn(items)``; when it raises, each row alone, so only the poison rows fail.

        Batched work (a model call) cannot say which row broke it; re-running the rows
        one by one finds out, and the good rows still get their results.
        """
        try:
            return fn(items)
        except Exception as e:
            if self.policy == "fail":
                raise
            log.warning(
                "%s: a batch of %d rows raised %s; retrying its rows one by one",
                self.function,
                len(items),
                type(e).__name__,
            )
        return self.rows(items, lambda x: fn([x])[0], on_error)
