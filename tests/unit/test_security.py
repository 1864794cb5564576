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
    KafkaSecurity,
    client_options,
    describe_listener,
    flink_table_options,
    key_password,
    python_client_options,
    resolve_security,
    secure_statement,
)
from flinkai.runtime.environment import Target, flink_settings
from flinkai.runtime.security import job_security, kafka_table_options
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


def test_flink_options_name_the_password_by_env_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("T_SEC_PW", CANARY)
    opts = flink_table_options(_scram())
    assert opts["properties.security.protocol"] == "SASL_SSL"
    assert opts["properties.sasl.mechanism"] == "SCRAM-SHA-512"
    jaas = opts["properties.sasl.jaas.config"]
    assert jaas.startswith(SHADED_PREFIX + "org.apache.kafka.common.security.scram.")
    assert jaas.endswith('username="alice" password="${env:T_SEC_PW}";')
    assert opts["properties.config.providers"] == "env"
    assert opts["properties.config.providers.env.class"] == (
        SHADED_PREFIX + "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
    )
    # the provider may read this one variable and no other
    assert opts["properties.config.providers.env.param.allowlist.pattern"] == "^(T_SEC_PW)$"
    assert opts["properties.ssl.truststore.type"] == "PEM"
    assert opts["properties.ssl.truststore.location"] == "/etc/ca.pem"
    assert leaks(CANARY, {"table options": json.dumps(opts)}) == []


def test_flink_options_name_a_password_file_by_dir_reference(tmp_path: Path) -> None:
    secret = tmp_path / "secrets" / "password"
    secret.parent.mkdir()
    secret.write_text(CANARY)
    sec = KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env="UNSET_BUT_THE_FILE_WINS",
        password_file=str(secret),
    )
    opts = flink_table_options(sec)
    assert f'password="${{dir:{secret.parent}:password}}";' in opts["properties.sasl.jaas.config"]
    assert opts["properties.config.providers"] == "dir"
    assert opts["properties.config.providers.dir.param.allowed.paths"] == str(secret.parent)
    assert leaks(CANARY, {"table options": json.dumps(opts)}) == []


def test_secret_references_the_client_could_not_resolve_are_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text(CANARY + "\n")  # the Kafka client would keep the line break

    def by_file(path: Path) -> KafkaSecurityConfig:
        return KafkaSecurityConfig(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username="u",
            password_file=str(path),
        )

    with pytest.raises(ConfigError, match="ends with a line break"):
        flink_table_options(by_file(secret))
    odd = tmp_path / "a:b"
    odd.mkdir()
    (odd / "pw").write_text(CANARY)
    with pytest.raises(ConfigError, match="placeholder cannot carry"):
        flink_table_options(by_file(odd / "pw"))
    monkeypatch.setenv("T_SEC_PW", 'pa"ss' + CANARY)
    with pytest.raises(ConfigError, match="double quote") as e:
        flink_table_options(_scram())
    monkeypatch.delenv("T_SEC_PW")
    with pytest.raises(ConfigError, match="T_SEC_PW is empty or unset"):
        flink_table_options(_scram())
    assert CANARY not in str(e.value)


def test_mtls_key_and_its_password_travel_as_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = tmp_path / "tls" / "client.key", tmp_path / "tls" / "client.pem"
    key.parent.mkdir()
    key.write_text(f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{CANARY}\n-----END")
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("T_KEY_PW", CANARY[::-1])
    sec = KafkaSecurityConfig(
        protocol="SSL",
        ca_file="/etc/ca.pem",
        cert_file=str(cert),
        key_file=str(key),
        key_password_env="T_KEY_PW",
    )
    opts = flink_table_options(sec)
    folder = key.parent
    assert opts["properties.ssl.keystore.type"] == "PEM"
    assert opts["properties.ssl.keystore.key"] == f"${{dir:{folder}:client.key}}"
    assert opts["properties.ssl.keystore.certificate.chain"] == f"${{dir:{folder}:client.pem}}"
    assert opts["properties.ssl.key.password"] == "${env:T_KEY_PW}"
    assert opts["properties.config.providers"] == "env,dir"
    assert opts["properties.config.providers.dir.param.allowed.paths"] == str(folder)
    assert "sasl.jaas.config" not in json.dumps(opts)
    text = json.dumps(opts)
    assert leaks(CANARY, {"options": text}) == [] and leaks(CANARY[::-1], {"o": text}) == []
    assert python_client_options(sec)["ssl_password"] == CANARY[::-1]
    with pytest.raises(ConfigError, match="needs key_file"):
        KafkaSecurityConfig(protocol="SSL", key_password_env="T_KEY_PW")


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


def test_security_resolved_once_needs_no_secret_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the runner resolves a job's security: both renderings from one read of each secret.
    key, cert = tmp_path / "client.key", tmp_path / "client.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n")
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("T_SEC_PW", CANARY)
    monkeypatch.setenv("T_KEY_PW", CANARY[::-1])
    sec = KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env="T_SEC_PW",
        ca_file="/etc/ca.pem",
        cert_file=str(cert),
        key_file=str(key),
        key_password_env="T_KEY_PW",
    )
    resolved = resolve_security(sec)
    assert dict(resolved.table_options) == flink_table_options(sec)
    assert dict(resolved.client_options) == python_client_options(sec)
    assert resolved.env_names == ("T_SEC_PW", "T_KEY_PW")  # what the JVM check compares
    assert leaks(CANARY, {"repr": repr(resolved)}) == []
    assert leaks(CANARY[::-1], {"repr": repr(resolved)}) == []
    # later steps read the value, not the environment: it may change meanwhile
    monkeypatch.delenv("T_SEC_PW")
    monkeypatch.delenv("T_KEY_PW")
    assert client_options(resolved)["sasl_plain_password"] == CANARY
    assert key_password(resolved) == CANARY[::-1]
    assert describe_listener(resolved, "h:9093") == describe_listener(sec, "h:9093")
    with pytest.raises(ConfigError, match="T_SEC_PW is empty or unset"):
        client_options(sec)  # the section alone reads the secret again


def test_job_security_of_a_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert job_security(Config()) == KafkaSecurity(KafkaSecurityConfig())  # PLAINTEXT: nothing
    assert client_options(None) == {} and client_options(job_security(Config())) == {}
    secret = tmp_path / "password"
    secret.write_text(CANARY)
    by_file = dict(_scram().__dict__, password_file=str(secret))
    config = Config().with_overrides(kafka={"security": by_file})
    resolved = job_security(config)
    assert resolved.env_names == ()  # a file reference: no variable for the JVM to miss
    assert dict(resolved.table_options) == kafka_table_options(config)
    monkeypatch.setenv("T_SEC_PW", 'pa"ss')  # resolution checks what the table options need
    with pytest.raises(ConfigError, match="double quote"):
        job_security(Config().with_overrides(kafka={"security": _scram().__dict__}))


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


def test_triton_server_tls_flags_and_options() -> None:
    from flinkai.serve.pytriton_app import _grpc_tls, parse_args
    from flinkai.serve.triton_server import TritonServerOptions

    base = ["--model-dir", "m", "--workspace", "w"]
    assert _grpc_tls(parse_args(base)) == {}
    tls = ["--grpc-server-cert", "s.crt", "--grpc-server-key", "s.key"]
    assert _grpc_tls(parse_args(base + tls)) == {
        "grpc_use_ssl": True,
        "grpc_server_cert": "s.crt",
        "grpc_server_key": "s.key",
    }
    mutual = _grpc_tls(parse_args([*base, *tls, "--grpc-root-cert", "ca.pem"]))
    assert (mutual["grpc_use_ssl_mutual"], mutual["grpc_root_cert"]) == (True, "ca.pem")
    with pytest.raises(ConfigError, match="go together"):
        TritonServerOptions(tls_cert_file="s.crt")
    with pytest.raises(ConfigError, match="needs tls_cert_file"):
        TritonServerOptions(tls_client_ca_file="ca.pem")


def test_a_pbes2_encrypted_client_key_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    # cryptography (like openssl by default) encrypts PKCS#8 keys with PBES2
    key = tmp_path / "client.key"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(CANARY.encode()),
        )
    )
    cert = tmp_path / "client.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("T_KEY_PW", CANARY)
    sec = KafkaSecurityConfig(
        protocol="SSL", cert_file=str(cert), key_file=str(key), key_password_env="T_KEY_PW"
    )
    with pytest.raises(ConfigError, match=r"PBES2.*-v1 PBE-SHA1-3DES") as e:
        flink_table_options(sec)
    assert CANARY not in str(e.value)
