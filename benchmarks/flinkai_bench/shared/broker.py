"""The broker a benchmark talks to: the one it was given, or a local one for the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["broker"]


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """Yield ``bootstrap`` when given; else start a local broker and stop it afterwards."""
    if bootstrap:
        yield bootstrap
        return
    from flinkai.testing import session_broker

    with session_broker() as local:
        yield local.bootstrap
