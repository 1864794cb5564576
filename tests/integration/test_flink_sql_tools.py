"""``jobs/embed_clicks.sql`` through Flink's own tools, on one standalone cluster.

- Flink's SQL Client: ``sql-client.sh -f`` with the variables filled in, ``-pyfs`` the
  bundled UDFs, ``-pyexec``/``-pyclientexec`` this interpreter, ``-j`` the connector;
- the SQL Gateway (``sql-gateway.sh``): open a session over REST with the same
  settings as session properties, submit each statement, poll each operation.

Neither tool ships a flinkai config to the UDFs, so they load the local one. Each run
reads both output topics to their end offsets: exactly the good ids embedded, and the
poison event dead-lettered with its reason and source offset.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port, stop_group
from flinkai.paths import bundled_udf_dir
from flinkai.runtime.cluster import LocalFlinkCluster
from flinkai.runtime.flink_tools import (
    SqlGatewayClient,
    opt_dir,
    python_settings,
    sql_client_argv,
    start_gateway,
    statements,
    tool_environment,
)
from flinkai.runtime.script import substitute
from flinkai.testing import check_exactly_once, dead_letter_id

from .streaming import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "embed_clicks.sql"
GOOD = 6
POISON = b'{"user_id": "u999", "click_text": "no time"}'  # missing_field
# Commits the exactly-once sink's transactions; the runner sets it for flinkai run.
CHECKPOINTS = {"execution.checkpointing.interval": "2s"}


@pytest.fixture
def cluster(flink_cluster: LocalFlinkCluster) -> LocalFlinkCluster:
    """The session's standalone cluster (see the integration conftest), idle."""
    return flink_cluster


@pytest.fixture(scope="module")
def tools_env(
    standalone_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    opt = opt_dir(tmp_path_factory.mktemp("opt"))
    c = standalone_cluster
    return tool_environment(c.conf_dir, c.lib_dir, c.log_dir, opt)


def _topics(bootstrap: str, tool: str) -> dict[str, str]:
    run_id = f"{tool}-{uuid.uuid4().hex[:8]}"
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "CLICKS_TOPIC": f"in-{run_id}",
        "EMBEDDINGS_TOPIC": f"out-{run_id}",
        "DLQ_TOPIC": f"dlq-{run_id}",
        "GROUP_ID": run_id,
        "SCAN_BOUNDED_MODE": "latest-offset",
        "TRANSACTIONAL_ID_PREFIX": run_id,
    }
    create_topics(
        bootstrap, [variables[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")]
    )
    events = [
        json.dumps(
            {
                "user_id": f"{tool}{i}",
                "click_text": f"event {i} from {tool}",
                "event_time": 1764576000000 + i,
            }
        ).encode()
        for i in range(GOOD)
    ]
    events.insert(3, POISON)  # offset 3
    produce(bootstrap, variables["CLICKS_TOPIC"], events)
    return variables


def _check_outputs(bootstrap: str, variables: dict[str, str], tool: str, log: str) -> None:
    embedded = consume_all(bootstrap, variables["EMBEDDINGS_TOPIC"], timeout_s=30)
    report = check_exactly_once(
        [f"{tool}{i}" for i in range(GOOD)],
        embedded,
        id_of=lambda r: str(json.loads(r.value or b"null")["user_id"]),
    )
    assert report.ok, f"{report}\n{log}"
    assert all(len(json.loads(r.value or b"null")["embedding_vec"]) == 384 for r in embedded)
    dead = consume_all(bootstrap, variables["DLQ_TOPIC"], timeout_s=30)
    assert [dead_letter_id(r) for r in dead] == [f"{variables['CLICKS_TOPIC']}:0:3"], log
    letter = json.loads(dead[0].value or b"null")
    assert letter["reason"] == "missing_field" and "event_time" in letter["detail"]


def _finished(cluster: LocalFlinkCluster, name: str) -> bool:
    jobs = cluster.rest("/jobs/overview")["jobs"]
    return any(j["name"] == name and j["state"] == "FINISHED" for j in jobs)


def test_sql_client_runs_embed_clicks(
    kafka_broker: LocalKafka,
    model_artifacts: object,
    cluster: LocalFlinkCluster,
    tools_env: dict[str, str],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap
    variables = _topics(bootstrap, "client")
    script = tmp_path / "embed_clicks.sql"
    name = f"embed-clicks-{variables['GROUP_ID']}"
    sets = {**CHECKPOINTS, "pipeline.name": name}
    text = substitute(JOB.read_text(encoding="utf-8"), variables, JOB)
    text = text.replace("SET 'pipeline.name' = 'flinkai-embed-clicks';", "")
    # -f runs an INSERT asynchronously unless told to wait for the job's end
    head = "".join(f"SET '{k}' = '{v}';\n" for k, v in {**sets, "table.dml-sync": "true"}.items())
    script.write_text(head + text, encoding="utf-8")

    argv = sql_client_argv(script, cluster.jobmanager, bundled_udf_dir())
    client = subprocess.run(
        argv, env=tools_env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    log = client.stdout[-3000:] + client.stderr[-3000:]
    assert client.returncode == 0, log
    assert "[ERROR]" not in client.stdout, log
    assert _finished(cluster, name), log + cluster.log_tail()
    _check_outputs(bootstrap, variables, "client", log)


def test_sql_gateway_runs_embed_clicks_over_rest(
    kafka_broker: LocalKafka,
    model_artifacts: object,
    cluster: LocalFlinkCluster,
    tools_env: dict[str, str],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap
    variables = _topics(bootstrap, "gateway")
    name = f"embed-clicks-{variables['GROUP_ID']}"
    port = free_port()
    out_file = tmp_path / "sql-gateway.out"
    gateway = start_gateway(tools_env, port, out_file)
    try:
        api = SqlGatewayClient(port)
        properties = {
            **python_settings(bundled_udf_dir()),
            **CHECKPOINTS,
            "execution.target": "remote",
            "rest.address": cluster.jobmanager.rsplit(":", 1)[0],
            "rest.port": str(cluster.rest_port),
        }
        session = api.open_session(properties)
        text = substitute(JOB.read_text(encoding="utf-8"), variables, JOB)
        text = text.replace("'flinkai-embed-clicks'", f"'{name}'")
        job_ids = []
        for statement in statements(text):
            page = api.run(session, statement)
            job_ids += [
                row["fields"][0]
                for row in page.get("results", {}).get("data", [])
                if statement.lstrip().upper().startswith("INSERT")
            ]
        assert len(job_ids) == 1, job_ids  # the INSERT's operation returned its job id
        log = out_file.read_text(errors="replace")[-3000:]
        assert wait_until(lambda: _finished(cluster, name), timeout_s=240), log + cluster.log_tail()
        assert cluster.api.job_status(job_ids[0]) == "FINISHED"
        _check_outputs(bootstrap, variables, "gateway", log)
        api.close_session(session)
    finally:
        stop_group(gateway)
