"""The embed job against a SASL_SSL (SCRAM-SHA-512 + TLS) broker, and where secrets go.

One secured broker for the module: certificates made at test time, the SCRAM user
created by the broker's own storage tool. The password reaches the job's Kafka
clients by reference only (a file, then an environment variable, resolved by the
client's config providers), and a canary password must not appear in any channel a
user or operator sees, the job graph and the metrics endpoint included.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkai.config import Config, KafkaSecurityConfig, load_config
from flinkai.errors import ConfigError
from flinkai.kafka.admin import Record, consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka, SecureListener
from flinkai.kafka.security import secure_statement
from flinkai.local.process import free_port
from flinkai.runtime.environment import Target, create_table_env, flink_settings
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.jars import connector_jars
from flinkai.runtime.runner import RunOptions, load_script, run_script
from flinkai.runtime.security import kafka_table_options
from flinkai.testing import unique_topic
from tests.integration.canary import leaks
from tests.integration.certs import Pki, make_pki
from tests.integration.streaming import with_rest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jobs" / "embed_clicks.sql"
CANARY = "canary-Kf7Rq2-x9PzW3mT"
PASSWORD_ENV = "FLINKAI_TEST_KAFKA_PASSWORD"
KEY_PASSWORD_ENV = "FLINKAI_TEST_KAFKA_KEY_PASSWORD"
N_GOOD = 18


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    made = make_pki(tmp_path_factory.mktemp("pki"))
    _key_password_file(made).write_text(made.client_key_password)  # no line break
    return made


def _key_password_file(pki: Pki) -> Path:
    return pki.client_key.with_name("client-key.password")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalKafka]:
    broker = LocalKafka(
        tmp_path_factory.mktemp("kafka-sasl-ssl"),
        # SCRAM login and a client certificate (mutual TLS), both required
        secure=SecureListener(pki.broker_pem, {"alice": CANARY}, client_ca=pki.ca),
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _security(
    pki: Pki, ca: Path | None = None, password_file: Path | None = None, client_cert: bool = True
) -> KafkaSecurityConfig:
    return KafkaSecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="alice",
        password_env=PASSWORD_ENV,
        password_file=str(password_file or ""),
        ca_file=str(ca or pki.ca),
        cert_file=str(pki.client_cert) if client_cert else "",
        key_file=str(pki.client_key) if client_cert else "",
        key_password_file=str(_key_password_file(pki)) if client_cert else "",
    )


def _config(sec: KafkaSecurityConfig) -> Config:
    return load_config(env={}).with_overrides(kafka={"security": sec.__dict__})


def _variables(broker: LocalKafka, run: str, bounded: bool = True) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": broker.bootstrap,
        "CLICKS_TOPIC": f"clicks-{run}",
        "EMBEDDINGS_TOPIC": f"emb-{run}",
        "DLQ_TOPIC": f"dlq-{run}",
        "SCAN_BOUNDED_MODE": "latest-offset" if bounded else "unbounded",
        "GROUP_ID": f"g-{run}",
    }


def _events() -> list[bytes]:
    good = [
        json.dumps({"user_id": f"u{i}", "click_text": f"secure click {i}", "event_time": 1})
        for i in range(N_GOOD)
    ]
    bad = json.dumps({"user_id": "u99", "click_text": CANARY[:3]})
    return [g.encode() for g in good] + [b"not json", bad.encode()]


def _prepare(broker: LocalKafka, sec: KafkaSecurityConfig, variables: dict[str, str]) -> None:
    topics = [variables[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")]
    create_topics(broker.bootstrap, topics, security=sec)
    produce(broker.bootstrap, topics[0], _events(), security=sec)


def _outputs(
    broker: LocalKafka, sec: KafkaSecurityConfig, variables: dict[str, str], timeout_s: float
) -> tuple[list[Record], list[Record]]:
    embedded = consume_all(
        broker.bootstrap,
        variables["EMBEDDINGS_TOPIC"],
        timeout_s=timeout_s,
        expect=N_GOOD,
        security=sec,
    )
    dead = consume_all(
        broker.bootstrap, variables["DLQ_TOPIC"], timeout_s=30, expect=2, security=sec
    )
    return embedded, dead


def _job_graph(config: Config, variables: dict[str, str]) -> tuple[bytes, str]:
    """The serialized JobGraph and the compiled-plan JSON of the job's Kafka tables.

    Built as the runner builds a job: the script's Kafka DDL with the runner's
    security options added, then an INSERT from the source into the sink (no Python
    UDF, which compiled plans do not take; the Kafka operators are what hold options).
    """
    from pyflink.java_gateway import get_gateway

    script = load_script(SCRIPT, config, variables)
    options = kafka_table_options(config)
    t_env = create_table_env(flink_settings(config, connector_jars(), [], Target()))
    for stmt in script.statements:
        if stmt.text.lstrip().upper().startswith("CREATE TEMPORARY TABLE"):
            t_env.execute_sql(secure_statement(stmt.text, options))
    statements = t_env.create_statement_set()
    statements.add_insert_sql(
        "INSERT INTO click_outputs (`topic`, user_id) "
        f"SELECT '{variables['EMBEDDINGS_TOPIC']}', CAST(payload AS STRING) FROM clicks_raw"
    )
    plan = statements.compile_plan().as_json_string()
    statements.attach_as_datastream()
    graph = t_env._j_tenv.execEnv().getStreamGraph(False).getJobGraph()
    util = get_gateway().jvm.org.apache.flink.util.InstantiationUtil
    return bytes(util.serializeObject(graph)), plan


@dataclass(frozen=True)
class SecureRun:
    """What one job run on the SASL_SSL broker left in each channel an operator sees."""

    embedded: list[Record]
    dead: list[Record]
    channels: dict[str, str]
    metric_names: set[str]
    job_graph: bytes
    #: Secrets besides the SASL password: the client key's password and a line of its body.
    other_secrets: tuple[str, ...]


#: Flink REST views of a job: its config (job parameters included), plan, vertices,
#: failures, and the JobManager's configuration.
_REST_VIEWS = (
    "/jobs/{job}",
    "/jobs/{job}/config",
    "/jobs/{job}/plan",
    "/jobs/{job}/exceptions",
    "/jobs/{job}/jobmanager/config",
    "/jobmanager/config",
    "/taskmanagers",
)


class _Collect(logging.Handler):
    """Every record any logger makes, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


def _scrape_all(url: str, rounds: int = 3) -> list[str]:
    """The endpoint's text a few times, 2 s apart (gauges appear as operators report)."""
    texts = []
    for i in range(rounds):
        if i:
            time.sleep(2.0)
        with urllib.request.urlopen(url, timeout=10) as response:
            texts.append(response.read().decode())
    return texts


@pytest.fixture(scope="module")
def secure_run(
    secure_broker: LocalKafka, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureRun]:
    """The embed job, unbounded, with the password in a file the Kafka client reads.

    While it runs: its REST job views and every Prometheus scrape. Then it is
    cancelled, and a Flink planning error, ``--explain`` and the job graph are made.
    """
    folder = tmp_path_factory.mktemp("secret")
    (folder / "password").write_text(CANARY)  # no line break: the client reads it verbatim
    sec = _security(pki, password_file=folder / "password")
    port = free_port()
    config, api = with_rest(
        _config(sec).with_overrides(
            runtime={"prometheus_port": port, "checkpoint_interval_ms": 1000}
        )
    )
    variables = _variables(secure_broker, unique_topic("secure"), bounded=False)
    _prepare(secure_broker, sec, variables)
    records = _Collect()
    root = logging.getLogger()
    root.addHandler(records)
    old_levels = {n: logging.getLogger(n).level for n in ("kafka", "flinkai")}
    for name in old_levels:  # kafka-python logs its whole config at DEBUG
        logging.getLogger(name).setLevel(logging.DEBUG)
    views: dict[str, str] = {}
    try:
        result = run_script(SCRIPT, config, RunOptions(variables=variables, wait=False))
        assert result.job_id is not None
        try:
            embedded, dead = _outputs(secure_broker, sec, variables, timeout_s=240)
            # still running: the scrapes and REST views below need the live job
            assert (len(embedded), len(dead)) == (N_GOOD, 2), "the secured job stalled"
            scrapes = _scrape_all(f"http://127.0.0.1:{port}/metrics")
            for path in _REST_VIEWS:
                views[f"rest {path}"] = json.dumps(api.get(path.format(job=result.job_id)))
        finally:
            if result.job_client is not None:
                result.job_client.cancel().result()
        bad = tmp_path_factory.mktemp("bad") / "bad.sql"
        bad.write_text(
            "CREATE TEMPORARY TABLE t (v BYTES) WITH ('connector' = 'kafka', 'topic' = 'x', "
            f"'properties.bootstrap.servers' = '{secure_broker.bootstrap}', 'format' = 'raw', "
            "'no.such.option' = '1');\nSELECT * FROM t;\n"
        )
        with pytest.raises(ScriptError) as planning_error:
            run_script(bad, config, RunOptions(explain=True))
        assert "Unsupported options" in str(planning_error.value)
        explained = run_script(SCRIPT, config, RunOptions(variables=variables, explain=True))
        graph, plan = _job_graph(config, variables)
    finally:
        root.removeHandler(records)
        for name, level in old_levels.items():
            logging.getLogger(name).setLevel(level)
    params = flink_settings(config, [], [], Target())["pipeline.global-job-parameters"]
    metric_names = {line.split("{")[0] for text in scrapes for line in text.splitlines()}
    channels = {
        "logs (DEBUG, every logger)": records.text(),
        "explain plan": explained.plan or "",
        "compiled plan json": plan,
        "job graph (java-serialized)": graph.decode("latin-1"),
        "job parameters": params,
        "job parameters decoded": base64.urlsafe_b64decode(params.split(":", 1)[1]).decode(),
        "dlq records": "\n".join((r.value or b"").decode() for r in dead),
        "planning error": str(planning_error.value),
        # the Java error it summarises; Flink masks the JAAS option in its option list
        "planning error cause": str(planning_error.value.__cause__),
        "prometheus /metrics (every scrape)": "\n".join(scrapes),
        **views,
        "broker log": secure_broker.log_file.read_text(errors="replace"),
    }
    key_body = pki.client_key.read_text().splitlines()[2]
    yield SecureRun(
        embedded, dead, channels, metric_names, graph, (pki.client_key_password, key_body)
    )


def test_embed_job_runs_with_the_password_the_kafka_client_reads_from_a_file(
    secure_run: SecureRun,
) -> None:
    assert len(secure_run.embedded) == N_GOOD
    assert sorted(json.loads(r.value or b"{}")["reason"] for r in secure_run.dead) == [
        "missing_field",
        "not_json",
    ]


def test_no_channel_shows_the_secret(secure_run: SecureRun) -> None:
    channels = secure_run.channels
    # Each channel is real: it holds what a leak would sit next to.
    assert "sasl_plain_password" in channels["logs (DEBUG, every logger)"]  # logged, redacted
    assert "TableSourceScan" in channels["explain plan"]
    assert b"sasl.jaas.config" in secure_run.job_graph
    assert b'password="${dir:' in secure_run.job_graph  # the reference, not the value
    assert b"ssl.keystore.key" in secure_run.job_graph
    assert "clicks_raw" in channels["compiled plan json"]
    assert "flinkai.config" in channels["rest /jobs/{job}/config"]
    names = secure_run.metric_names
    # Flink's, flinkai's and the Kafka clients' metrics (client tags become labels)
    assert any("KafkaProducer" in n for n in names), sorted(names)[:40]
    assert any("KafkaConsumer" in n for n in names), sorted(names)[:40]
    assert any(n.startswith("flink_taskmanager_job_task_operator_flinkai") for n in names)
    assert leaks(CANARY, channels) == []
    for secret in secure_run.other_secrets:
        assert leaks(secret, channels) == []


def test_cli_runs_the_job_with_the_password_the_kafka_client_reads_from_env(
    secure_broker: LocalKafka, pki: Pki
) -> None:
    """A fresh process: its Flink JVM starts with the variable, as a TaskManager would."""
    sec = _security(pki)
    variables = _variables(secure_broker, unique_topic("secure-cli"))
    os.environ[PASSWORD_ENV] = CANARY  # the admin helpers of this process read it too
    try:
        _prepare(secure_broker, sec, variables)
        env = {
            # earlier in-process jobs left PyFlink's worker markers; a fresh CLI must not see them
            **{k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")},
            "FLINKAI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FLINKAI_KAFKA_SECURITY_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLINKAI_KAFKA_SECURITY_USERNAME": "alice",
            "FLINKAI_KAFKA_SECURITY_PASSWORD_ENV": PASSWORD_ENV,
            "FLINKAI_KAFKA_SECURITY_CA_FILE": str(pki.ca),
            "FLINKAI_KAFKA_SECURITY_CERT_FILE": str(pki.client_cert),
            "FLINKAI_KAFKA_SECURITY_KEY_FILE": str(pki.client_key),
            "FLINKAI_KAFKA_SECURITY_KEY_PASSWORD_ENV": KEY_PASSWORD_ENV,
            KEY_PASSWORD_ENV: pki.client_key_password,
        }
        cli = subprocess.run(
            [sys.executable, "-m", "flinkai.cli.main", "-v", "run", str(SCRIPT)]
            + [f"--var={k}={v}" for k, v in variables.items()],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr[-2000:]
        embedded, dead = _outputs(secure_broker, sec, variables, timeout_s=30)
    finally:
        del os.environ[PASSWORD_ENV]
    assert (len(embedded), len(dead)) == (N_GOOD, 2)
    for secret in (CANARY, pki.client_key_password):
        assert leaks(secret, {"cli stdout": cli.stdout, "cli stderr": cli.stderr}) == []


def test_a_variable_the_flink_jvm_never_saw_is_refused(
    secure_run: SecureRun, secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # secure_run started this process's Flink JVM; a variable set since is not in it
    late = "FLINKAI_TEST_KAFKA_PASSWORD_SET_LATE"
    monkeypatch.setenv(late, CANARY)
    sec = dataclasses.replace(_security(pki), password_env=late)
    with pytest.raises(ConfigError, match=late) as e:
        run_script(SCRIPT, _config(sec), RunOptions(variables=_variables(secure_broker, "late")))
    assert "started before" in str(e.value)
    assert leaks(CANARY, {"error": str(e.value)}) == []


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


def test_a_client_without_a_certificate_fails_before_submission(
    secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    config = _config(_security(pki, client_cert=False))
    with pytest.raises(ScriptError) as e:
        run_script(SCRIPT, config, RunOptions(variables=_variables(secure_broker, "nocert")))
    text = str(e.value)
    assert f"SASL_SSL listener at {secure_broker.bootstrap}" in text
    assert "refused the client certificate (no cert_file" in text
    assert leaks(CANARY, {"error": text}) == []


def _store_config(broker: LocalKafka, sec: KafkaSecurityConfig, topic: str) -> Config:
    return _config(sec).with_overrides(
        kafka={"bootstrap_servers": broker.bootstrap}, llm={"store": "kafka", "topic": topic}
    )


def test_snapshot_store_puts_and_gets_over_the_secure_listener(
    secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from flinkai.functions.llm import build_store, kafka_store_config
    from flinkai.state import KafkaSnapshotStore, ReopeningStore, SnapshotKey

    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    config = _store_config(secure_broker, _security(pki), unique_topic("kv-secure"))
    tensor = np.arange(2 * 3 * 64 * 64, dtype=np.float32).reshape(2, 3, 64, 64)
    key = SnapshotKey("m", 0, "ab" * 16)
    # The store llm_complete opens (wrapped, so a broker down at start is not fatal).
    writer = build_store(config)
    assert isinstance(writer, ReopeningStore) and writer.available
    try:
        version = writer.put(key, tensor, model_version="r1")
    finally:
        writer.close()
    # A second store (a cold worker) reads it back through SASL_SSL + mTLS.
    with KafkaSnapshotStore(kafka_store_config(config)) as reader:
        got = reader.get(key, model_version="r1")
        assert got is not None and got.version == version
        np.testing.assert_array_equal(got.tensor, tensor)
        assert reader.stats.fetched_bytes > 0  # read from the topic, not a local cache


def test_snapshot_store_with_a_wrong_password_fails_clearly(
    secure_broker: LocalKafka, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flinkai.functions.llm import kafka_store_config
    from flinkai.state import KafkaSnapshotStore, StoreUnavailableError

    wrong = "wrong-" + CANARY[::-1]
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    config = _store_config(secure_broker, _security(pki), unique_topic("kv-wrongpw"))
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as e:
        KafkaSnapshotStore(kafka_store_config(config))
    elapsed = time.monotonic() - started
    text = str(e.value)
    assert f"SASL login to the SASL_SSL listener at {secure_broker.bootstrap}" in text
    assert "SCRAM-SHA-512" in text and "alice" in text
    # Far below the store's 30 s request timeout: no hang on a refused login.
    assert elapsed < 15, elapsed
    assert leaks(wrong, {"error": text}) == [] and leaks(CANARY, {"error": text}) == []
