"""Render ``kafka.security`` for the two kinds of client flinkai runs.

Flink's Kafka SQL connector takes client settings as ``properties.*`` table options;
kafka-python (the admin helpers, the preflight probe) takes keyword arguments. Both
are built from one :class:`~flinkai.config.KafkaSecurityConfig`, with the password
read through :func:`flinkai.security.read_secret` so it is redacted everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flinkai.config import KafkaSecurityConfig
from flinkai.errors import ConfigError
from flinkai.security import read_secret, register_secret

__all__ = [
    "SHADED_PREFIX",
    "describe_listener",
    "flink_table_options",
    "python_client_options",
    "secure_statement",
]

#: flink-sql-connector-kafka relocates the Kafka client under this package, so the
#: JAAS login module must be named with it (the plain class is not in the jar).
SHADED_PREFIX = "org.apache.flink.kafka.shaded."
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_KAFKA_CONNECTOR_RE = re.compile(r"'connector'\s*=\s*'(?:upsert-)?kafka'", re.I)
_WITH_RE = re.compile(r"\bWITH\s*\(", re.I)


def _password(sec: KafkaSecurityConfig) -> str:
    return read_secret("kafka.security.password", sec.password_env, sec.password_file)


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def describe_listener(sec: KafkaSecurityConfig, bootstrap: str) -> str:
    """``SASL_SSL listener at host:port (SCRAM-SHA-512, user alice)``: for error messages."""
    text = f"{sec.protocol} listener at {bootstrap}"
    if sec.sasl:
        text += f" ({sec.sasl_mechanism}, user {sec.username})"
    return text


def flink_table_options(
    sec: KafkaSecurityConfig, shaded_prefix: str = SHADED_PREFIX
) -> dict[str, str]:
    """``properties.*`` options of a Flink Kafka table; empty for ``PLAINTEXT``."""
    if sec.protocol == "PLAINTEXT":
        return {}
    out: dict[str, str] = {"properties.security.protocol": sec.protocol}
    if sec.sasl:
        module = shaded_prefix + _LOGIN_MODULES[sec.sasl_mechanism]
        out["properties.sasl.mechanism"] = sec.sasl_mechanism
        out["properties.sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quote(sec.username)}" '
            f'password="{_jaas_quote(_password(sec))}";'
        )
    if sec.tls and sec.ca_file:
        out["properties.ssl.truststore.type"] = "PEM"
        out["properties.ssl.truststore.location"] = str(Path(sec.ca_file).expanduser())
    if sec.tls and sec.cert_file:
        # Kafka's PEM key store wants key and chain in one file, or both inline.
        key = _read_pem(sec.key_file, "kafka.security.key_file")
        register_secret(key)
        out["properties.ssl.keystore.type"] = "PEM"
        out["properties.ssl.keystore.certificate.chain"] = _read_pem(
            sec.cert_file, "kafka.security.cert_file"
        )
        out["properties.ssl.keystore.key"] = key
    return out


def _read_pem(path: str, what: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what}: cannot read {path}: {e}") from None


def python_client_options(sec: KafkaSecurityConfig) -> dict[str, Any]:
    """kafka-python keyword arguments (``security_protocol``, ``sasl_*``, ``ssl_*``)."""
    if sec.protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.sasl:
        out["sasl_mechanism"] = sec.sasl_mechanism
        out["sasl_plain_username"] = sec.username
        out["sasl_plain_password"] = _password(sec)
    if sec.tls:
        if sec.ca_file:
            out["ssl_cafile"] = str(Path(sec.ca_file).expanduser())
        if sec.cert_file:
            out["ssl_certfile"] = str(Path(sec.cert_file).expanduser())
            out["ssl_keyfile"] = str(Path(sec.key_file).expanduser())
    return out


def _sql_quote(value: str) -> str:
    return value.replace("'", "''")


def secure_statement(text: str, options: Mapping[str, str]) -> str:
    """``text`` with ``options`` added to its Kafka table's ``WITH (...)``.

    Statements that are not Kafka tables come back unchanged, and so does any option
    the statement sets itself: an explicit table option wins over the config.
    """
    connector = _KAFKA_CONNECTOR_RE.search(text)
    if not options or connector is None:
        return text
    withs = [m for m in _WITH_RE.finditer(text) if m.end() <= connector.start()]
    if not withs:
        return text
    at = withs[-1].end()
    present = {k.lower() for k in re.findall(r"'([^']+)'\s*=", text[at:])}
    added = [
        f"'{_sql_quote(k)}' = '{_sql_quote(v)}'"
        for k, v in options.items()
        if k.lower() not in present
    ]
    if not added:
        return text
    return f"{text[:at]}\n  {', '.join(added)},{text[at:]}"
