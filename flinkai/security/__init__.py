"""Secrets by reference, and their redaction from everything flinkai prints.

A secret enters flinkai only through :func:`read_secret` (an environment variable or a
file named in the config). Every value it returns is registered with the process-wide
redactor, which log records, error messages and ``--explain`` output pass through.
"""

from flinkai.security.redact import REDACTED, Redactor, redact, register_secret
from flinkai.security.secrets import read_secret

__all__ = ["REDACTED", "Redactor", "read_secret", "redact", "register_secret"]
