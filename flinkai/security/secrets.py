"""Read a secret from the environment variable or file the config names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from flinkai.errors import ConfigError
from flinkai.security.redact import register_secret

__all__ = ["read_secret"]


def read_secret(
    what: str, env_name: str = "", file_path: str = "", env: Mapping[str, str] | None = None
) -> str:
    """The secret in ``file_path`` (trailing newline dropped), else in ``$env_name``.

    The value is registered for redaction before it is returned. Errors name the
    variable or the file, never a value.

    Args:
        what: The config field the secret is for, e.g. ``kafka.security.password``.
        env_name: Environment variable holding the secret.
        file_path: File holding the secret (a mounted Kubernetes Secret, say).
        env: Environment to read; ``os.environ`` by default.

    Raises:
        ConfigError: Neither is given, the variable is unset or empty, or the file is
            missing, unreadable or empty.
    """
    if file_path:
        path = Path(file_path).expanduser()
        try:
            value = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"{what}: cannot read secret file {path}: {e.strerror}") from None
        where = f"file {path}"
    elif env_name:
        value = (os.environ if env is None else env).get(env_name, "")
        where = f"environment variable {env_name}"
    else:
        raise ConfigError(f"{what}: no secret reference (set its _env or _file field)")
    if not value:
        raise ConfigError(f"{what}: {where} is empty or unset")
    register_secret(value)
    return value
