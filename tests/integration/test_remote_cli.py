"""The remote path as users run it: the real CLI against a real standalone cluster.

``flinkai run jobs/embed_clicks.sql --jobmanager HOST:PORT --detach`` runs in a
subprocess, with nothing set in its environment but what a user would have; the
client exits, and the job must keep running on the cluster with its Python UDF
workers as children of the TaskManager (not of the client, which is gone). A
TaskManager kill then proves the job recovers there on its own.

Application mode, as the Helm chart runs it: Flink's ``standalone-job`` entry point
with ``-pym flinkai.cli.main run jobs/embed_clicks.sql`` plus a separate TaskManager.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.runtime.cluster import LocalFlinkCluster, client_environment

from .streaming import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "embed_clicks.sql"
FLINKAI = Path(sys.executable).with_name("flinkai")


def _events(start: int, n: int) -> list[bytes]:
    return [
        json.dumps(
            {"user_id": f"r{i}", "click_text": f"remote event {i}", "event_time": 1764576000000 + i}
        ).encode()
        for i in range(start, start + n)
    ]


def _variables(bootstrap: str, run_id: str, bounded: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": bootstrap,
        "CLICKS_TOPIC": f"rin-{run_id}",
        "EMBEDDINGS_TOPIC": f"rout-{run_id}",
        "DLQ_TOPIC": f"rdlq-{run_id}",
        "GROUP_ID": f"remote-{run_id}",
        "SCAN_BOUNDED_MODE": bounded,
    }


def _user_env() -> dict[str, str]:
    """The environment a user's shell has: none of PyFlink's worker settings."""
    return client_environment()


def _committed_ids(bootstrap: str, topic: str, expect: int) -> list[str]:
    records = consume_all(bootstrap, topic, timeout_s=90, expect=expect)
    # read once more to the end offsets: a duplicate after the expect-th record shows
    records = consume_all(bootstrap, topic, timeout_s=30)
    return [json.loads(r.value)["user_id"] for r in records if r.value]


def test_cli_detach_runs_workers_on_the_taskmanager(
    kafka_broker: LocalKafka, model_artifacts: object, flink_cluster: LocalFlinkCluster
) -> None:
    bootstrap = kafka_broker.bootstrap
    run_id = uuid.uuid4().hex[:8]
    variables = _variables(bootstrap, run_id, "unbounded")
    create_topics(
        bootstrap, [variables[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")]
    )
    produce(bootstrap, variables["CLICKS_TOPIC"], _events(0, 20))
    argv = [str(FLINKAI), "run", str(JOB), "--jobmanager", flink_cluster.jobmanager, "--detach"]
    for name, value in variables.items():
        argv += ["--var", f"{name}={value}"]

    client = subprocess.run(
        argv, env=_user_env(), capture_output=True, text=True, timeout=240, cwd=REPO
    )
    assert client.returncode == 0, client.stdout + client.stderr
    # Registering the Python UDFs loads Beam's coders; its cloud-filesystem warning stays hidden.
    assert "Failed to import" not in client.stderr, client.stderr
    match = re.search(r"submitted job ([0-9a-f]{32})", client.stdout)
    assert match, client.stdout
    job_id = match.group(1)
    api = flink_cluster.api
    try:
        # The client has exited; results still arrive, so the job does not need it.
        assert sorted(_committed_ids(bootstrap, variables["EMBEDDINGS_TOPIC"], 20)) == sorted(
            f"r{i}" for i in range(20)
        ), flink_cluster.log_tail()
        # The UDF workers are the TaskManager's children: the client that could have
        # hosted a loopback pool has exited, and nothing else runs Python for the job.
        workers = flink_cluster.taskmanager_children()
        assert any("beam_boot" in cmd for cmd in workers.values()), workers

        killed = flink_cluster.kill_taskmanager()
        assert not killed.alive()
        flink_cluster.start_taskmanager()
        produce(bootstrap, variables["CLICKS_TOPIC"], _events(20, 20))
        ids = _committed_ids(bootstrap, variables["EMBEDDINGS_TOPIC"], 40)
        assert wait_until(lambda: api.restarts(job_id) >= 1, timeout_s=60), (
            "the job did not restart after its TaskManager died"
        )
        assert api.job_exceptions(job_id), "no failure in the job's exception history"
        counts = Counter(ids)
        assert set(counts) == {f"r{i}" for i in range(40)}, flink_cluster.log_tail()
        assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1]
        assert api.job_status(job_id) == "RUNNING"
    finally:
        if api.job_status(job_id) == "RUNNING":
            api.cancel(job_id)


def test_application_mode_as_the_helm_chart_runs_it(
    kafka_broker: LocalKafka, model_artifacts: object, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    run_id = uuid.uuid4().hex[:8]
    variables = _variables(bootstrap, run_id, "latest-offset")
    create_topics(
        bootstrap, [variables[k] for k in ("CLICKS_TOPIC", "EMBEDDINGS_TOPIC", "DLQ_TOPIC")]
    )
    produce(bootstrap, variables["CLICKS_TOPIC"], [*_events(0, 15), b"not json"])
    args = ["-pym", "flinkai.cli.main", "run", str(JOB)]
    for name, value in variables.items():
        args += ["--var", f"{name}={value}"]

    # Keep the JobManager up after the bounded job ends, so the test can read its REST API.
    conf = {"execution.shutdown-on-application-finish": "false"}
    with LocalFlinkCluster(tmp_path / "app", slots=1, application=args, flink_conf=conf) as cluster:
        ids = _committed_ids(bootstrap, variables["EMBEDDINGS_TOPIC"], 15)
        assert sorted(ids) == sorted(f"r{i}" for i in range(15)), cluster.log_tail()
        dead = consume_all(bootstrap, variables["DLQ_TOPIC"], timeout_s=30, expect=1)
        assert [json.loads(r.value or b"{}")["reason"] for r in dead] == ["not_json"]
        jobs = cluster.rest("/jobs/overview")["jobs"]
        assert len(jobs) == 1 and jobs[0]["name"] == "flinkai-embed-clicks", jobs
