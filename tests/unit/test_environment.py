import sys
from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.errors import ConfigError
from flinkai.runtime.environment import CONFIG_JOB_PARAMETER, Target, decode_config, flink_settings
from flinkai.runtime.java_errors import summarize_java_error


def test_settings_pin_the_worker_interpreter_and_ship_config(tmp_path: Path) -> None:
    config = load_config(env={})
    jar = tmp_path / "c.jar"
    settings = flink_settings(config, [jar], [tmp_path], Target())
    assert settings["python.executable"] == sys.executable
    assert settings["python.client.executable"] == sys.executable
    assert settings["pipeline.jars"] == jar.resolve().as_uri()
    assert settings["python.files"] == str(tmp_path.resolve())
    key, _, value = settings["pipeline.global-job-parameters"].partition(":")
    assert key == CONFIG_JOB_PARAMETER
    assert "," not in value and ":" not in value
    assert decode_config(value) == config
    assert "execution.target" not in settings


def test_remote_target_and_bad_jobmanager() -> None:
    config = load_config(env={})
    remote = flink_settings(config, [], [], Target("flink-jm:8081"))
    assert (remote["execution.target"], remote["rest.address"], remote["rest.port"]) == (
        "remote",
        "flink-jm",
        "8081",
    )
    with pytest.raises(ConfigError, match="host:port"):
        flink_settings(config, [], [], Target("no-port"))


def test_arrow_batch_larger_than_bundle_is_rejected() -> None:
    config = load_config(env={}).with_overrides(
        runtime={"arrow_batch_size": 512, "python_bundle_size": 100}
    )
    with pytest.raises(ConfigError, match="arrow_batch_size"):
        flink_settings(config, [], [], Target())


def test_java_error_summary_keeps_root_cause_and_python_error() -> None:
    trace = (
        "org.apache.flink.table.api.ValidationException: SQL validation failed. boom\n"
        "\tat org.apache.flink.Foo.bar(Foo.java:1)\n"
        "Caused by: org.apache.calcite.sql.validate.SqlValidatorException: No match found for function\n"
        "\tat x.y(Z.java:2)\n"
        "Caused by: java.lang.RuntimeException: Error received from SDK harness\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: bad input\n'
    )
    summary = summarize_java_error(Exception(trace))
    assert "SQL validation failed" in summary
    assert "No match found for function" in summary
    assert "Python error in a UDF: ValueError: bad input" in summary
    assert "\tat " not in summary


def test_prometheus_reporter_only_when_a_port_is_set() -> None:
    off = flink_settings(load_config(env={}), [], [], Target())
    assert not any(k.startswith("metrics.reporter.") for k in off)
    on = flink_settings(
        load_config(env={}).with_overrides(runtime={"prometheus_port": 9311}), [], [], Target()
    )
    assert on["metrics.reporter.prom.port"] == "9311"
