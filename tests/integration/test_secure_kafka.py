"""The embed job against a SASL_SSL (SCRAM-SHA-512 + TLS) broker, and where secrets go.

One secured broker for the module: certificates made at test time, the SCRAM user
created by the broker's own storage tool. A canary password must not appear in any
channel a user or operator sees.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flinkai.config import Config, KafkaSecurityConfig, load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka, SecureListener
from flinkai.runtime.environment import Target, flink_settings
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.runner import RunOptions, run_script
from flinkai.testing import unique_topic
from tests.integration.canary import leaks
from tests.integration.certs import Pki, make_pki

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jobs" / "embed_clicks.sql"
CANARY = "canary-Kf7Rq2-x9PzW3mT"
PASSWORD_ENV = "FLINKAI_TEST_KAFKA_PASSWORD"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalKafka]:
    broker = LocalKafka(
        tmp_path_factory.mktemp("kafka-sasl-ssl"),
        secure=SecureListener(pki.broker_pem, {"alice": CANARY}),
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _security(pki: Pki, ca: Path | None = None) -> KafkaSecurityConfig:
    return KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env=PASSWORD_ENV,
        ca_file=str(ca or pki.ca),
    )


def _config(sec: KafkaSecurityConfig) -> Config:
    return load_config(env={}).with_overrides(kafka={"security": sec.__dict__})


def _variables(broker: LocalKafka, run: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": broker.bootstrap,
        "CLICKS_TOPIC": f"clicks-{run}",
        "EMBEDDINGS_TOPIC": f"emb-{run}",
        "DLQ_TOPIC": f"dlq-{run}",
        "SCAN_BOUNDED_MODE": "latest-offset",
        "GROUP_ID": f"g-{run}",
    }


def test_embed_job_on_sasl_ssl_and_no_channel_shows_the_secret(
    secure_broker: LocalKafka,
    pki: Pki,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    for name in ("kafka", "flinkai"):
        caplog.set_level(logging.DEBUG, logger=name)  # kafka-python logs its config at DEBUG
    sec = _security(pki)
    config = _config(sec)
    variables = _variables(secure_broker, unique_topic("secure"))
    topics = [variables[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")]
    create_topics(secure_broker.bootstrap, topics, security=sec)
    events = [
        json.dumps(
            {"user_id": f"u{i}", "click_text": f"secure click {i}", "event_time": 1}
        ).encode()
        for i in range(18)
    ] + [b"not json", json.dumps({"user_id": "u99", "click_text": CANARY[:3]}).encode()]
    produce(secure_broker.bootstrap, topics[0], events, security=sec)

    run_script(SCRIPT, config, RunOptions(variables=variables, timeout_s=240))

    embedded = consume_all(secure_broker.bootstrap, topics[1], timeout_s=30, security=sec)
    dead = consume_all(secure_broker.bootstrap, topics[2], timeout_s=30, security=sec)
    assert len(embedded) == 18
    assert sorted(json.loads(r.value or b"{}")["reason"] for r in dead) == [
        "missing_field",
        "not_json",
    ]

    # A Flink planning error on a Kafka table: its message lists the table's options.
    bad = tmp_path / "bad.sql"
    bad.write_text(
        "CREATE TEMPORARY TABLE t (v BYTES) WITH ('connector' = 'kafka', 'topic' = 'x', "
        f"'properties.bootstrap.servers' = '{secure_broker.bootstrap}', 'format' = 'raw', "
        "'no.such.option' = '1');\nSELECT * FROM t;\n"
    )
    with pytest.raises(ScriptError) as planning_error:
        run_script(bad, config, RunOptions(explain=True))
    assert "Unsupported options" in str(planning_error.value)

    # The CLI: --explain plans the same job in a fresh process, config from FLINKAI_* vars.
    env = {
        # the in-process job left PyFlink's worker markers in os.environ; a fresh CLI must not see them
        **{k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")},
        "FLINKAI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "FLINKAI_KAFKA_SECURITY_SASL_MECHANISM": "SCRAM-SHA-512",
        "FLINKAI_KAFKA_SECURITY_USERNAME": "alice",
        "FLINKAI_KAFKA_SECURITY_PASSWORD_ENV": PASSWORD_ENV,
        "FLINKAI_KAFKA_SECURITY_CA_FILE": str(pki.ca),
    }
    cli = subprocess.run(
        [sys.executable, "-m", "flinkai.cli.main", "-v", "run", str(SCRIPT), "--explain"]
        + [f"--var={k}={v}" for k, v in variables.items()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "TableSourceScan" in cli.stdout

    params = flink_settings(config, [], [], Target())["pipeline.global-job-parameters"]
    captured = capfd.readouterr()
    channels = {
        "logs": caplog.text,
        "test process stdout/stderr": captured.out + captured.err,
        "cli stdout (--explain)": cli.stdout,
        "cli stderr": cli.stderr,
        "job parameters": params,
        "job parameters decoded": base64.urlsafe_b64decode(params.split(":", 1)[1]).decode(),
        "dlq records": "\n".join((r.value or b"").decode() for r in dead),
        "planning error": str(planning_error.value),
        # the Java error it summarises; Flink masks the JAAS option in its option list
        "planning error cause": str(planning_error.value.__cause__),
        "broker log": secure_broker.log_file.read_text(errors="replace"),
    }
    assert "DEBUG" in caplog.text and "sasl_plain_password" in caplog.text  # logged, redacted
    assert leaks(CANARY, channels) == []


def test_wrong_password_fails_before_submission(
    secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-" + CANARY[::-1]
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    config = _config(_security(pki))
    with pytest.raises(ScriptError) as e:
        run_script(SCRIPT, config, RunOptions(variables=_variables(secure_broker, "wrongpw")))
    text = str(e.value)
    assert f"SASL_SSL listener at {secure_broker.bootstrap}" in text
    assert "SCRAM-SHA-512" in text and "embed_clicks.sql:" in text
    assert leaks(wrong, {"error": text}) == [] and leaks(CANARY, {"error": text}) == []


def test_untrusted_certificate_fails_before_submission(
    secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    config = _config(_security(pki, ca=pki.other_ca))
    with pytest.raises(ScriptError) as e:
        run_script(SCRIPT, config, RunOptions(variables=_variables(secure_broker, "untrusted")))
    text = str(e.value)
    assert f"SASL_SSL listener at {secure_broker.bootstrap}" in text
    assert "not trusted" in text and str(pki.other_ca) in text
    assert leaks(CANARY, {"error": text}) == []
