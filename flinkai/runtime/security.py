"""The runner's side of ``kafka.security``: resolved once, then a login and a JVM check.

The runner calls :func:`job_security` once, before it builds the job, and carries the
:class:`~flinkai.kafka.security.KafkaSecurity` it returns to every step: the login
check, the broker queries, the Kafka tables' DDL and the JVM check. Its table options
are added to each Kafka table's DDL just before it is executed. They name secrets by
reference only (Kafka config-provider placeholders, resolved by the Kafka client on
the JobManager or TaskManager that creates it), so neither the script, the compiled
plan, the job graph nor the job parameters hold a secret.
"""

from __future__ import annotations

import os
import re

from flinkai.config import Config
from flinkai.errors import ConfigError
from flinkai.kafka.errors import KafkaError
from flinkai.kafka.probe import check_access
from flinkai.kafka.security import KafkaSecurity, resolve_security
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Script
from flinkai.security import redact

__all__ = ["check_jvm_environment", "check_kafka_logins", "job_security", "kafka_table_options"]

_KAFKA_CONNECTOR_RE = re.compile(r"'connector'\s*=\s*'(upsert-)?kafka'", re.I)
_BOOTSTRAP_RE = re.compile(r"'properties\.bootstrap\.servers'\s*=\s*'([^']+)'", re.I)


def job_security(config: Config) -> KafkaSecurity:
    """``config.kafka.security`` resolved for one job: each secret read and checked once.

    Raises:
        ConfigError: A secret's variable is unset or its file unreadable, or it
            cannot be passed by reference.
    """
    return resolve_security(config.kafka.security)


def kafka_table_options(config: Config) -> dict[str, str]:
    """``properties.*`` options the runner adds to every Kafka table (none for PLAINTEXT).

    For code that builds a job's tables by hand; the runner uses :func:`job_security`.

    Raises:
        ConfigError: The password's variable is unset or its file unreadable.
    """
    return dict(job_security(config).table_options)


def check_kafka_logins(script: Script, security: KafkaSecurity) -> None:
    """Log in once to every bootstrap address of the script's Kafka tables.

    Raises:
        ScriptError: A login or TLS handshake failed; it names ``file:line``, the
            listener and the mechanism.
    """
    if security.config.protocol == "PLAINTEXT":
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
                check_access(servers, security)
            except KafkaError as e:
                raise ScriptError(f"{script.where(stmt)}: {redact(str(e))}") from None


def check_jvm_environment(security: KafkaSecurity) -> None:
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
    if not security.env_names:
        return
    from pyflink.java_gateway import _gateway

    if _gateway is None:
        return
    system = _gateway.jvm.java.lang.System
    for name in security.env_names:
        if system.getenv(name) != os.environ.get(name):
            raise ConfigError(
                f"kafka.security: the Flink JVM of this process was started before "
                f"${name} got its current value, and the job's Kafka clients read it "
                "there; set it before the first job of the process, or use a *_file "
                "reference"
            )
