"""Secrets by reference, redaction, and how kafka.security renders for each client."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest

from flinkai.config import Config, KafkaSecurityConfig, load_config
from flinkai.errors import ConfigError
from flinkai.kafka.security import (
    SHADED_PREFIX,
    flink_table_options,
    python_client_options,
    secure_statement,
)
from flinkai.runtime.environment import Target, flink_settings
from flinkai.security import REDACTED, Redactor, read_secret, redact
from tests.integration.canary import leaks

CANARY = "canary-unit-Zq81x7Lp"


def _scram(env: str = "T_SEC_PW") -> KafkaSecurityConfig:
    return KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env=env,
        ca_file="/etc/ca.pem",
    )


def test_env_overrides_reach_the_nested_section(tmp_path: Path) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("kafka:\n  security:\n    username: bob\n    password_env: PW\n")
    env = {
        "FLINKAI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "FLINKAI_KAFKA_SECURITY_SASL_MECHANISM": "SCRAM-SHA-512",
    }
    sec = load_config(yaml_file, env=env).kafka.security
    assert (sec.protocol, sec.sasl_mechanism, sec.username, sec.password_env) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "bob",
        "PW",
    )


def test_config_has_no_place_for_a_literal_password(tmp_path: Path) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("kafka:\n  security:\n    password: hunter22\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(yaml_file, env={})


def test_sasl_without_credentials_is_rejected() -> None:
    with pytest.raises(ConfigError, match="needs username"):
        KafkaSecurityConfig(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")


def test_read_secret_prefers_the_file_and_names_only_the_reference(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text(CANARY + "\n")
    assert read_secret("x", "UNSET_VAR", str(f), env={}) == CANARY
    with pytest.raises(ConfigError, match="UNSET_VAR") as e:
        read_secret("x", "UNSET_VAR", env={})
    assert CANARY not in str(e.value)


def test_flink_options_use_the_shaded_login_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_SEC_PW", 'pa"ss' + CANARY)
    opts = flink_table_options(_scram())
    assert opts["properties.security.protocol"] == "SASL_SSL"
    assert opts["properties.sasl.mechanism"] == "SCRAM-SHA-512"
    jaas = opts["properties.sasl.jaas.config"]
    assert jaas.startswith(SHADED_PREFIX + "org.apache.kafka.common.security.scram.")
    assert 'password="pa\\"ss' in jaas  # quotes escaped for JAAS
    assert opts["properties.ssl.truststore.type"] == "PEM"
    assert opts["properties.ssl.truststore.location"] == "/etc/ca.pem"


def test_python_client_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_SEC_PW", CANARY)
    assert python_client_options(_scram()) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": CANARY,
        "ssl_cafile": "/etc/ca.pem",
    }
    assert python_client_options(KafkaSecurityConfig()) == {}


def test_secure_statement_adds_options_to_kafka_tables_only() -> None:
    ddl = (
        "CREATE TABLE t (a STRING) WITH (\n  'connector' = 'kafka',\n"
        "  'properties.security.protocol' = 'SSL',\n  'topic' = 'x'\n)"
    )
    out = secure_statement(ddl, {"properties.security.protocol": "SASL_SSL", "k": "it's"})
    assert "'k' = 'it''s'" in out
    assert "SASL_SSL" not in out  # the statement's own option wins
    other = "CREATE TABLE t (a INT) WITH ('connector' = 'datagen')"
    assert secure_statement(other, {"k": "v"}) == other


def test_job_parameters_carry_the_reference_not_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("T_SEC_PW", CANARY)
    config = Config().with_overrides(kafka={"security": _scram().__dict__})
    flink_table_options(config.kafka.security)  # the client did read the secret
    params = flink_settings(config, [], [], Target())["pipeline.global-job-parameters"]
    decoded = base64.urlsafe_b64decode(params.split(":", 1)[1]).decode()
    assert json.loads(decoded)["kafka"]["security"]["password_env"] == "T_SEC_PW"
    assert leaks(CANARY, {"job parameters": params, "decoded": decoded}) == []


def test_log_records_and_tracebacks_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    read_secret("x", "V", env={"V": CANARY})
    log = logging.getLogger("tests.security")
    with caplog.at_level(logging.INFO):
        log.info("config %s", {"password": CANARY})
        try:
            raise ValueError(f"bad {CANARY}")
        except ValueError:
            log.exception("failed")
    assert CANARY not in caplog.text
    assert REDACTED in caplog.text
    assert redact(f"x{CANARY}y") == f"x{REDACTED}y"


def test_redactor_ignores_short_values() -> None:
    r = Redactor()
    r.add("ab")
    r.add("abcdef")
    assert r.redact("ab abcdef") == f"ab {REDACTED}"


def test_canary_checker_finds_a_planted_secret() -> None:
    # the checker's negative test: a planted canary, plain and base64, must be found
    planted = json.dumps({"kafka": {"password": CANARY}})
    channels = {
        "clean": "nothing here",
        "plain": f"error: {CANARY}",
        "b64": base64.urlsafe_b64encode(planted.encode()).decode(),
        "b64-shifted": base64.b64encode(b"x" + planted.encode()).decode(),
    }
    assert leaks(CANARY, channels) == ["b64", "b64-shifted", "plain"]


def test_triton_tls_options_are_file_paths() -> None:
    from flinkai.backends.triton import tls_options
    from flinkai.config import TritonConfig

    assert tls_options(TritonConfig()) == {}
    assert tls_options(TritonConfig(tls=True, ca_file="/etc/ca.pem")) == {
        "ssl": True,
        "root_certificates": "/etc/ca.pem",
        "private_key": None,
        "certificate_chain": None,
    }
