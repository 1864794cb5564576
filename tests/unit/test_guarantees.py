import pytest

from flinkai.config import load_config
from flinkai.runtime.environment import Target, flink_settings
from flinkai.runtime.guarantees import check_delivery, duration_ms
from flinkai.runtime.script import parse_script


def sink(**options: str) -> str:
    base = {
        "connector": "kafka",
        "topic": "out",
        "sink.delivery-guarantee": "exactly-once",
        "sink.transactional-id-prefix": "job-a",
    }
    base.update(options)
    body = ",\n".join(f"'{k}' = '{v}'" for k, v in base.items() if v != "-")
    return f"CREATE TEMPORARY TABLE out_t (x STRING) WITH (\n{body}\n);\n"


def findings(sql: str, broker_max: int | None = None, **runtime: int) -> list[tuple[str, str]]:
    config = load_config(env={}).with_overrides(runtime=runtime) if runtime else load_config(env={})
    settings = flink_settings(config, [], [], Target())
    return [
        (f.level, f.message)
        for f in check_delivery(parse_script(sql).statements, settings, broker_max)
    ]


def test_defaults_pass_with_a_15_minute_transaction_timeout() -> None:
    assert (
        findings(sink(**{"properties.transaction.timeout.ms": "900000"}), broker_max=900000) == []
    )


def test_connector_default_timeout_exceeds_a_stock_broker() -> None:
    [(level, message)] = findings(sink(), broker_max=900000)
    assert level == "error"
    assert "exceeds the broker's transaction.max.timeout.ms=900000" in message


def test_timeout_shorter_than_restart_budget_is_data_loss() -> None:
    [(level, message)] = findings(sink(**{"properties.transaction.timeout.ms": "60000"}))
    assert level == "error"
    assert "worst-case commit delay" in message
    assert "losing data" in message


def test_checkpointing_off_and_missing_prefix() -> None:
    got = findings(sink(**{"sink.transactional-id-prefix": "-"}), checkpoint_interval_ms=0)
    messages = " | ".join(m for _, m in got)
    assert "transactional-id-prefix" in messages
    assert "checkpointing is off" in messages


def test_set_statement_overrides_runtime_settings() -> None:
    sql = "SET 'execution.checkpointing.interval' = '20 min';\n" + sink(
        **{"properties.transaction.timeout.ms": "900000"}
    )
    [(level, message)] = findings(sql)
    assert level == "error" and "checkpoint interval 1200000" in message


def test_at_least_once_and_uncommitted_reads_warn() -> None:
    sql = sink(**{"sink.delivery-guarantee": "at-least-once"}) + (
        "CREATE TEMPORARY TABLE src (x STRING) WITH ('connector' = 'kafka', 'topic' = 'in',"
        " 'scan.startup.mode' = 'earliest-offset', 'properties.isolation.level' = 'read_uncommitted');"
    )
    levels = findings(sql)
    assert [lvl for lvl, _ in levels] == ["warning", "warning"]


@pytest.mark.parametrize(
    ("text", "ms"), [("250", 250), ("5 s", 5000), ("10 min", 600000), ("1 h", 3600000)]
)
def test_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


def source(bounded: str) -> str:
    return (
        "CREATE TEMPORARY TABLE in_t (x STRING) WITH (\n'connector' = 'kafka',\n"
        f"'topic' = 'in',\n'scan.startup.mode' = 'earliest-offset',\n'scan.bounded.mode' = '{bounded}'\n);\n"
    )


def test_bounded_scan_with_restarts_warns_of_flink_31006() -> None:
    [(level, message)] = findings(source("latest-offset"), restart_attempts=3)
    assert level == "warning"
    assert "never finishes (FLINK-31006)" in message and "3 restart(s)" in message


def test_bounded_scan_without_restarts_or_unbounded_scan_is_quiet() -> None:
    assert findings(source("latest-offset"), restart_attempts=0) == []
    assert findings(source("unbounded"), restart_attempts=3) == []
