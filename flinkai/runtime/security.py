"""The runner's side of ``kafka.security``: options for every Kafka table, and a login check.

The options (password included) are added to each Kafka table's DDL just before it
is executed, so the parsed script, its error messages and the job parameters never
hold the secret. The DDL itself does: Flink compiles table options into the job
graph (see README, "Security", for what that exposes).
"""

from __future__ import annotations

import re

from flinkai.config import Config
from flinkai.kafka.errors import KafkaError
from flinkai.kafka.probe import check_access
from flinkai.kafka.security import flink_table_options
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Script
from flinkai.security import redact

__all__ = ["check_kafka_logins", "kafka_table_options"]

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
