"""The runner's side of ``kafka.security``: options for every Kafka table, and a login check.

The options are added to each Kafka table's DDL just before it is executed. They
name secrets by reference only (Kafka config-provider placeholders, resolved by the
Kafka client on the JobManager or TaskManager that creates it), so neither the
script, the compiled plan, the job graph nor the job parameters hold a secret.
"""

from __future__ import annotations

import os
import re

from flinkai.config import Config
from flinkai.errors import ConfigError
from flinkai.kafka.errors import KafkaError
from flinkai.kafka.probe import check_access
from flinkai.kafka.security import flink_table_options
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Script
from flinkai.security import redact

__all__ = ["check_jvm_environment", "check_kafka_logins", "kafka_table_options"]

_KAFKA_CONNECTOR_RE = re.compile(r"'connector'\s*=\s*'(upsert-)?kafka'", re.I)
_BOOTSTRAP_RE = re.compile(r"'properties\.bootstrap\.servers'\s*=\s*'([^']+)'", re.I)


def kafka_table_options(config: Config) -> dict[str, str]:
    """``properties.*`` options the runner adds to every Kafka table (none for PLAINTEXT).

    Raises:
        ConfigError: The password's variable is unset or its file unreadable.
    """
    return flink_table_options(config.kafka.security)


def check_kafka_logins(script: Script, config: Config) -> None:
    """Log in once to every bootstrap address of the script's Kafka tables.

    Raises:
        ScriptError: A login or TLS handshake failed; it names ``file:line``, the
            listener and the mechanism.
    """
    sec = config.kafka.security
    if sec.protocol == "PLAINTEXT":
        return
    checked: set[str] = set()
    for stmt in script.statements:
        if not _KAFKA_CONNECTOR_RE.search(stmt.text):
            continue
        for servers in _BOOTSTRAP_RE.findall(stmt.text):
            if servers in checked:
                continue
            checked.add(servers)
            try:
                check_access(servers, sec)
            except KafkaError as e:
                raise ScriptError(f"{script.where(stmt)}: {redact(str(e))}") from None


def _env_references(config: Config) -> list[str]:
    """Environment variables the Kafka clients of the job read secrets from."""
    sec = config.kafka.security
    names = []
    if sec.sasl and sec.password_env and not sec.password_file:
        names.append(sec.password_env)
    if sec.tls and sec.cert_file and sec.key_password_env and not sec.key_password_file:
        names.append(sec.key_password_env)
    return names


def check_jvm_environment(config: Config) -> None:
    """A local job's Kafka clients must see the secret variables this process sees.

    A local job runs in the JVM that PyFlink started for this process, and that JVM
    kept the environment of the moment it started. If it started before a variable
    was set (or changed), its Kafka clients would read a stale or missing value, and
    the job would retry logins forever. Nothing to check before the JVM exists: it
    will inherit the current environment.

    Raises:
        ConfigError: The JVM lacks a variable, or holds another value; the error
            names the variable, never a value.
    """
    names = _env_references(config)
    if not names:
        return
    from pyflink.java_gateway import _gateway

    if _gateway is None:
        return
    system = _gateway.jvm.java.lang.System
    for name in names:
        if system.getenv(name) != os.environ.get(name):
            raise ConfigError(
                f"kafka.security: the Flink JVM of this process was started before "
                f"${name} got its current value, and the job's Kafka clients read it "
                "there; set it before the first job of the process, or use a *_file "
                "reference"
            )
