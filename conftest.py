"""Shared fixtures: a real Kafka broker per test session, unique topics, datasets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flinkai.datasets import datasets_dir
from flinkai.errors import SetupError
from flinkai.kafka.broker import LocalKafka
from flinkai.models.artifacts import ModelArtifacts
from flinkai.rag.server import ChromaServer
from flinkai.testing import start_session_broker, unique_topic
from tests.services import start_or_fail

#: Datasets shared between checkouts (``$FLINKAI_DATASETS_DIR`` or
#: ``<repo>/../shared/datasets``); may be absent.
SHARED_DATASETS = datasets_dir()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A real single-node Kafka broker on a free loopback port, for the whole session.

    ``.bootstrap`` is ``127.0.0.1:PORT``. Its data dir (with ``broker.log``) stays in
    pytest's temp area for post-mortems. Missing jars fail the test rather than
    skip it: CI installs them, so a skip would hide a broken setup.
    """
    data_dir = tmp_path_factory.mktemp("kafka")
    failure: str | None = None
    try:
        broker = start_session_broker(data_dir)
    except SetupError as e:
        failure = f"cannot start the test Kafka broker: {e}"
    if failure is not None:
        # Outside the except block, so the report shows the message, not a chained traceback.
        pytest.fail(failure, pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """A real Chroma server on a free loopback port, for the whole session.

    ``.url`` is ``http://127.0.0.1:PORT``; ``.config()`` is a ``RagConfig`` pointed
    at it. Tests share the server, so each uses its own collection
    (:func:`chroma_collection`). A missing ``chromadb`` fails rather than skips.
    """
    server = start_or_fail(
        ChromaServer(tmp_path_factory.mktemp("chroma")), "the test Chroma server"
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def chroma_collection(request: pytest.FixtureRequest) -> str:
    """A Chroma collection name unique to this test (created by whoever opens it)."""
    return unique_topic(request.node.name)[-60:].lstrip("-._")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (not created; tests create what they need)."""
    return unique_topic(request.node.name)


@pytest.fixture
def shared_datasets() -> Path:
    """The shared data sets (:func:`flinkai.datasets.datasets_dir`); skips when absent."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def model_artifacts() -> ModelArtifacts:
    """The default ONNX artifacts; exported now when missing (needs the ``torch`` extra)."""
    from flinkai.config import ModelConfig
    from flinkai.models.artifacts import load_artifacts
    from flinkai.models.errors import ArtifactError

    try:
        return load_artifacts(ModelConfig())
    except ArtifactError:
        from flinkai.models.export import export_model

        return export_model(ModelConfig()).artifacts
