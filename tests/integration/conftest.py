"""Fixtures shared by the integration tests of one feature."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flinkai.anomaly.nab import require_nab_folder
from flinkai.anomaly.spec import ModelSpec
from flinkai.anomaly.train import TrainOptions, train_model
from flinkai.datasets import datasets_dir
from flinkai.runtime.cluster import LocalFlinkCluster
from tests.services import start_or_fail

from .streaming import wait_until

#: NAB in its layout (``data/<group>/*.csv``, ``combined_windows.json``), as CI has it.
SHARED_NAB = datasets_dir() / "nab"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small hybrid anomaly model trained for a few epochs on realTraffic's probationary rows.

    Trained once per session: the anomaly job tests only need a model whose state
    and scores are real, not a good one.
    """
    pytest.importorskip("torch")
    # CI has the shared subset beside the checkout: its absence fails, never skips.
    require_nab_folder(SHARED_NAB)
    spec = ModelSpec(kind="hybrid", hidden=16, attn_dim=8, heads=2, window=32)
    out = tmp_path_factory.mktemp("anomaly-model") / "hybrid"
    return train_model(
        spec, SHARED_NAB, out, TrainOptions(epochs=2, threads=1), ["realTraffic"]
    ).folder


@pytest.fixture(scope="session")
def risk_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fraud and credit models (30 trees each) trained on the shared risk data, as ONNX.

    Trained once per session: the risk job tests need real models and scores, not the
    best ones (``flinkai model train-risk`` builds those).
    """
    import lightgbm  # noqa: F401  (CI has it: missing, the risk tests fail, never skip)

    from flinkai.agents.data import default_fraud_file
    from flinkai.agents.train import TrainOptions, train_risk_models

    # CI has the shared risk data beside the checkout: its absence fails, never skips.
    if not default_fraud_file().is_file():
        pytest.fail(f"risk data not found at {default_fraud_file()}")
    out = tmp_path_factory.mktemp("risk-models")
    train_risk_models(out, options=TrainOptions(n_estimators=30))
    return out


#: Job states after which a job holds no slot.
_ENDED = {"FINISHED", "CANCELED", "FAILED"}


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFlinkCluster]:
    """One standalone Flink cluster (a JobManager, one single-slot TaskManager) for the session.

    Starting one took 8-14 s per test; the tests that need real JobManager and
    TaskManager processes (to SIGKILL a TaskManager, to see a detached job's workers
    on it, to point Flink's own tools at) take turns on this one through
    :func:`flink_cluster`. Its work dir, with every process's log, stays in pytest's
    temp area for post-mortems.
    """
    # A standalone ResourceManager waits for TaskManagers to register only during its
    # start-up period (by default the 5 min slot request timeout); after it, a restart
    # that finds no TaskManager fails at once, and spends one more restart attempt, as
    # a fault test's job did while its new TaskManager was still starting. Each test
    # had a cluster of its own, always young: a start-up period as long as the session
    # keeps that.
    conf = {"resourcemanager.standalone.start-up-time": "24 h"}
    cluster = LocalFlinkCluster(tmp_path_factory.mktemp("flink"), slots=1, flink_conf=conf)
    start_or_fail(cluster, "the standalone Flink cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


def _cancel_jobs(cluster: LocalFlinkCluster) -> bool:
    """Ask the cluster to cancel every job still holding a slot; whether none was left."""
    api = cluster.api
    running = [j["jid"] for j in api.get("/jobs/overview")["jobs"] if j["state"] not in _ENDED]
    for job_id in running:
        api.cancel(job_id)
    return not running


def _python_workers(cluster: LocalFlinkCluster) -> list[int]:
    return [pid for pid, cmd in cluster.taskmanager_children().items() if "beam_boot" in cmd]


@pytest.fixture
def flink_cluster(standalone_cluster: LocalFlinkCluster) -> Iterator[LocalFlinkCluster]:
    """The session's standalone cluster, idle: no job, a live registered TaskManager, a free slot.

    A test may kill TaskManagers and start others (the fault tests do); the next test
    gets whichever is running, or a new one when none is. Afterwards every job is
    cancelled, and a TaskManager whose Python workers outlive its jobs for 30 s is
    killed: no worker may be left for another test to find among this process's
    descendants (``streaming.python_workers``).
    """
    cluster = standalone_cluster
    _cancel_jobs(cluster)
    if not cluster.taskmanagers():
        cluster.start_taskmanager()
    for tm in cluster.taskmanagers():
        cluster.wait_for_taskmanager(tm)
    live = {tm.resource_id for tm in cluster.taskmanagers()}
    api = cluster.api

    def idle() -> bool:
        # Only live TaskManagers registered: a job must not be given a killed one's slot.
        free = int(api.get("/overview").get("slots-available") or 0)
        return set(cluster.registered_taskmanagers()) == live and free >= 1

    if not wait_until(lambda: _cancel_jobs(cluster) and idle(), 60):
        pytest.fail(f"the standalone cluster is not idle: {cluster.log_tail()}", pytrace=False)
    yield cluster
    if not wait_until(lambda: _cancel_jobs(cluster) and not _python_workers(cluster), 30):
        for tm in cluster.taskmanagers():
            cluster.kill_taskmanager(tm)
