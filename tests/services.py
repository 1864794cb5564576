"""Starting a test's real service (a broker, a cluster, a server) or failing the test."""

from __future__ import annotations

from typing import Protocol, TypeVar

import pytest

from flinkai.errors import SetupError

__all__ = ["start_or_fail"]


class _Service(Protocol):
    def start(self) -> object: ...


S = TypeVar("S", bound=_Service)


def start_or_fail(service: S, what: str, errors: tuple[type[Exception], ...] = (SetupError,)) -> S:
    """Start ``service``; on one of ``errors``, fail the test with ``cannot start WHAT``.

    A missing part fails rather than skips: the suite's evidence needs the real thing.
    """
    failure: str | None = None
    try:
        service.start()
    except errors as e:
        failure = f"cannot start {what}: {e}"
    if failure is not None:  # outside the handler: no chained traceback in the report
        pytest.fail(failure, pytrace=False)
    return service
