"""Check, before a job starts, that its Kafka delivery guarantees can actually hold.

Exactly-once Kafka sinks write inside transactions that a checkpoint commits. If
the broker times a transaction out before a restarted job gets to commit it, the
records are silently lost; if the producer asks for a longer timeout than the
broker allows, the job fails at start. Both are configuration mistakes that are
cheap to catch here and expensive to find in production.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flinkai.config import Config
from flinkai.runtime.script import Kind, Statement, parse_set

__all__ = [
    "Finding",
    "TableOptions",
    "check_delivery",
    "duration_ms",
    "for_bounded_scan",
    "kafka_tables",
    "scan_bound",
]

#: The Kafka connector's default producer transaction timeout (1 h).
DEFAULT_TRANSACTION_TIMEOUT_MS = 3_600_000

_CREATE_TABLE_RE = re.compile(
    r"^CREATE\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?([\w.]+)`?", re.I
)
_OPTION_RE = re.compile(r"'((?:[^']|'')+)'\s*=\s*'((?:[^']|'')*)'")


@dataclass(frozen=True)
class TableOptions:
    """A Kafka table declared in the script, with its WITH options."""

    name: str
    statement: Statement
    options: Mapping[str, str]


@dataclass(frozen=True)
class Finding:
    """A problem (``error``) or a caution (``warning``) about a statement."""

    level: str
    statement: Statement
    message: str


def duration_ms(value: str) -> int:
    """Parse Flink durations: ``5000``, ``5 s``, ``10 min``, ``250 ms``, ``1 h``."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if m is None:
        raise ValueError(f"not a duration: {value!r}")
    n, unit = int(m.group(1)), m.group(2)
    scale = {
        "": 1,
        "ms": 1,
        "milli": 1,
        "millis": 1,
        "s": 1000,
        "sec": 1000,
        "second": 1000,
        "seconds": 1000,
        "min": 60_000,
        "m": 60_000,
        "minute": 60_000,
        "minutes": 60_000,
        "h": 3_600_000,
        "hour": 3_600_000,
        "hours": 3_600_000,
    }.get(unit)
    if scale is None:
        raise ValueError(f"unknown duration unit in {value!r}")
    return n * scale


def kafka_tables(statements: Sequence[Statement]) -> list[TableOptions]:
    """Kafka tables created by the script (connector ``kafka``)."""
    out = []
    for stmt in statements:
        m = _CREATE_TABLE_RE.match(stmt.text)
        if m is None:
            continue
        options = {
            k.replace("''", "'"): v.replace("''", "'") for k, v in _OPTION_RE.findall(stmt.text)
        }
        if options.get("connector") == "kafka":
            out.append(TableOptions(m.group(1), stmt, options))
    return out


def scan_bound(table: TableOptions) -> str | None:
    """The table's ``scan.bounded.mode`` when it scans a bounded range, else None."""
    mode = table.options.get("scan.bounded.mode", "unbounded")
    return None if mode == "unbounded" else mode


def for_bounded_scan(config: Config) -> Config:
    """``config`` without restarts, for a job that scans Kafka with ``scan.bounded.mode``.

    A bounded Kafka source restored from a checkpoint reads to its stopping offsets and
    then never finishes (FLINK-31006, open upstream), so a failover would hang the job;
    without restarts it fails at once with its reason.
    """
    return config.with_overrides(runtime={"restart_attempts": 0})


def check_delivery(
    statements: Sequence[Statement],
    settings: Mapping[str, str],
    broker_max_transaction_timeout_ms: int | None = None,
) -> list[Finding]:
    """Findings for every Kafka table in the script, given the effective Flink settings."""
    effective = dict(settings)
    for stmt in statements:
        if stmt.kind is Kind.SET:
            key, value = parse_set(stmt)
            effective[key] = value
    interval = effective.get("execution.checkpointing.interval")
    interval_ms = duration_ms(interval) if interval else 0
    timeout_ms = duration_ms(effective.get("execution.checkpointing.timeout", "10 min"))
    attempts = int(effective.get("restart-strategy.fixed-delay.attempts", "1"))
    delay_ms = duration_ms(effective.get("restart-strategy.fixed-delay.delay", "1 s"))
    findings: list[Finding] = []
    for table in kafka_tables(statements):
        guarantee = table.options.get("sink.delivery-guarantee")
        if guarantee is None:
            continue  # a source, or a sink relying on the connector default (at-least-once)
        if guarantee != "exactly-once":
            if guarantee == "at-least-once":
                findings.append(
                    Finding(
                        "warning",
                        table.statement,
                        f"table {table.name}: at-least-once: a failure can duplicate records",
                    )
                )
            continue
        if not table.options.get("sink.transactional-id-prefix"):
            findings.append(
                Finding(
                    "error",
                    table.statement,
                    f"table {table.name}: exactly-once needs 'sink.transactional-id-prefix', "
                    "unique per job (use ${TRANSACTIONAL_ID_PREFIX})",
                )
            )
        if interval_ms <= 0:
            findings.append(
                Finding(
                    "error",
                    table.statement,
                    f"table {table.name}: exactly-once commits on checkpoints, but "
                    "checkpointing is off (set runtime.checkpoint_interval_ms)",
                )
            )
            continue
        txn_ms = int(
            table.options.get("properties.transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        )
        # Worst case between writing a record and committing it: a full interval, a
        # checkpoint that runs to its timeout, then every restart attempt with its delay.
        budget_ms = interval_ms + timeout_ms + attempts * (delay_ms + timeout_ms)
        if txn_ms <= budget_ms:
            findings.append(
                Finding(
                    "error",
                    table.statement,
                    f"table {table.name}: properties.transaction.timeout.ms={txn_ms} is not above the "
                    f"worst-case commit delay {budget_ms} ms (checkpoint interval {interval_ms} + "
                    f"checkpoint timeout {timeout_ms} + {attempts} restart(s) x (delay {delay_ms} + "
                    f"timeout {timeout_ms})); the broker could abort transactions a recovering job "
                    "still has to commit, losing data. Raise the transaction timeout or lower the others.",
                )
            )
        if (
            broker_max_transaction_timeout_ms is not None
            and txn_ms > broker_max_transaction_timeout_ms
        ):
            findings.append(
                Finding(
                    "error",
                    table.statement,
                    f"table {table.name}: properties.transaction.timeout.ms={txn_ms} exceeds the broker's "
                    f"transaction.max.timeout.ms={broker_max_transaction_timeout_ms}; the producer would be "
                    "rejected at start. Lower it, or raise the broker limit.",
                )
            )
    for table in kafka_tables(statements):
        if "sink.delivery-guarantee" in table.options:
            continue
        bounded = scan_bound(table)
        if bounded is not None and attempts > 0:
            # FLINK-31006: the enumerator restored from a checkpoint never signals "no
            # more splits", so the job reads to its stopping offsets and stays RUNNING.
            findings.append(
                Finding(
                    "warning",
                    table.statement,
                    f"table {table.name}: scan.bounded.mode={bounded} with {attempts} restart(s): "
                    "a bounded Kafka scan that fails over never finishes (FLINK-31006); for a "
                    "backfill set runtime.restart_attempts to 0, or read unbounded and cancel "
                    "once the output is complete",
                )
            )
        if (
            "scan.startup.mode" in table.options
            and table.options.get("properties.isolation.level", "read_committed")
            != "read_committed"
        ):
            findings.append(
                Finding(
                    "warning",
                    table.statement,
                    f"table {table.name}: reads uncommitted records (aborted data may appear)",
                )
            )
    return findings
