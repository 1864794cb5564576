"""Errors of the local services (kept apart from :mod:`flinkai.errors`: this package is a leaf)."""

from __future__ import annotations

__all__ = ["ServiceError", "ServiceNotInstalled"]


class ServiceError(RuntimeError):
    """A local service did not start, died, or answered with an error."""


class ServiceNotInstalled(ServiceError):
    """The service's program is not on this machine; the message names how to install it."""
