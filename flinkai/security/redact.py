"""Replace known secret values with a marker in text, log records and tracebacks."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

__all__ = ["REDACTED", "Redactor", "install_log_redaction", "redact", "register_secret"]

REDACTED = "[redacted]"
#: Shorter values would blank out ordinary words; secrets are longer than this anyway.
_MIN_LENGTH = 4


class Redactor:
    """A set of secret values, and text with each of them replaced by :data:`REDACTED`."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        """Redact ``secret`` from now on; values shorter than 4 characters are ignored."""
        if len(secret) >= _MIN_LENGTH:
            with self._lock:
                self._secrets.add(secret)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def redact(self, text: str) -> str:
        # Longest first: a secret that contains another is replaced whole.
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


_default = Redactor()
_installed = False


def register_secret(secret: str) -> None:
    """Add ``secret`` to the process-wide redactor and redact it from log records."""
    _default.add(secret)
    install_log_redaction()


def redact(text: str) -> str:
    """``text`` without any secret registered in this process."""
    return _default.redact(text) if _default else text


def install_log_redaction() -> None:
    """Redact every log record made from now on, whichever logger and handler it meets.

    A record factory rather than a handler filter: handlers added later (pytest's
    capture, a CLI's own) get redacted records too. The traceback is formatted here
    for the same reason, since exception messages may quote a secret.
    """
    global _installed
    if _installed:
        return
    _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if _default:
            record.msg = _default.redact(record.getMessage())
            record.args = None
            if record.exc_info and record.exc_info[0] is not None:
                text = "".join(traceback.format_exception(*record.exc_info))
                record.exc_text = _default.redact(text.rstrip("\n"))
        return record

    logging.setLogRecordFactory(factory)
