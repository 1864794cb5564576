"""The Triton backend against a real Triton server (PyTriton) on free loopback ports.

The server runs in its own venv (``cache_root()/venvs/triton``), built once on first
use (about a minute); after that this module takes well under a minute: one server
start, two restarts, a few hundred embedded texts. A machine that cannot build the
venv or export the model fails here with the reason: a skip would hide it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CircuitOpenError,
    InvalidInputError,
    ModelNotFoundError,
)
from flinkai.backends.factory import create_embedding_backend
from flinkai.backends.triton import TritonEmbeddingBackend
from flinkai.config import Config, EmbeddingConfig, ModelConfig, TritonConfig
from flinkai.datasets import load_ag_news
from flinkai.errors import MissingDependencyError, SetupError
from flinkai.local.process import free_port
from flinkai.models.artifacts import ModelArtifacts, load_artifacts
from flinkai.models.errors import ArtifactError
from flinkai.serve.triton_server import (
    TritonServer,
    TritonServerOptions,
    _group_shm_segments,
    ensure_server_venv,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

N_TEXTS = 96


def _fail(message: str) -> None:
    # Called outside ``except`` blocks so the report shows the message, not a traceback.
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="module")
def artifacts() -> ModelArtifacts:
    """The default exported model, exported now if missing."""
    failure = ""
    try:
        return load_artifacts(ModelConfig())
    except ArtifactError:
        pass  # not exported yet: export below
    try:
        from flinkai.models.export import export_model

        return export_model(ModelConfig()).artifacts
    except (MissingDependencyError, SetupError) as e:
        failure = f"no model artifacts and cannot export them: {e}"
    _fail(failure)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def server_venv() -> Path:
    failure = ""
    try:
        return ensure_server_venv(progress=print)
    except SetupError as e:
        failure = (
            "cannot build the Triton server venv (nvidia-pytriton needs x86-64 "
            f"manylinux_2_35 and access to PyPI): {e}"
        )
    _fail(failure)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def server(
    artifacts: ModelArtifacts, server_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    options = TritonServerOptions(
        grpc_port=free_port(),
        http_port=free_port(),
        metrics_port=free_port(),
        threads=2,
        start_timeout_s=120.0,
        stop_timeout_s=15.0,
        run_dir=tmp_path_factory.mktemp("triton"),
        venv=server_venv,
    )
    srv = TritonServer(options, progress=print)
    failure = ""
    try:
        srv.start()
    except SetupError as e:
        failure = f"cannot start Triton: {e}"
    if failure:
        _fail(failure)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [text for _, text in load_ag_news(limit=N_TEXTS)]


@pytest.fixture(scope="module")
def reference(artifacts: ModelArtifacts, texts: list[str]) -> np.ndarray:
    """The exported graph run directly with onnxruntime, one text at a time (no padding)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    session = ort.InferenceSession(str(artifacts.model_path), providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(artifacts.tokenizer_path))
    tokenizer.enable_truncation(artifacts.max_seq_length)
    rows = []
    for enc in tokenizer.encode_batch(texts):
        feed = {
            "input_ids": np.array([enc.ids], dtype=np.int64),
            "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
        }
        rows.append(session.run(["sentence_embedding"], feed)[0][0])
    return np.stack(rows)


def _config(server: TritonServer, **triton: object) -> Config:
    settings: dict[str, object] = {
        "url": server.grpc_url,
        "model_name": server.model_name,
        "timeout_s": 10.0,
        "max_retries": 2,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.2,
        "circuit_failure_threshold": 3,
        "circuit_reset_s": 1.0,
        **triton,
    }
    return Config(
        triton=TritonConfig(**settings),  # type: ignore[arg-type]
        embedding=EmbeddingConfig(backend="triton", batch_size=16),
    )


@pytest.fixture
def backend(server: TritonServer) -> Iterator[TritonEmbeddingBackend]:
    if not server.is_running():
        server.start()  # an earlier test may have killed it
    b = TritonEmbeddingBackend(_config(server))
    b.load()
    try:
        yield b
    finally:
        b.close()


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# -- (a) correctness --------------------------------------------------------------------


def test_embeddings_match_onnxruntime(
    backend: TritonEmbeddingBackend,
    artifacts: ModelArtifacts,
    texts: list[str],
    reference: np.ndarray,
) -> None:
    out = backend.infer_batch(texts).outputs
    assert out.shape == (len(texts), 384) and out.dtype == np.float32
    assert _cosine(out, reference).min() >= 0.999
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-4)
    assert backend.model_version == artifacts.model_version  # same string as the ONNX backend
    assert set(backend.cold_start.phases_s) >= {
        "tokenizer_load",
        "server_check",
        "warmup_first_batch",
    }
    assert backend.stats.retries == 0


def test_registry_builds_the_triton_backend(server: TritonServer) -> None:
    backend = create_embedding_backend(_config(server))
    assert isinstance(backend, TritonEmbeddingBackend)


def test_concurrent_callers_share_one_backend(
    backend: TritonEmbeddingBackend, texts: list[str], reference: np.ndarray
) -> None:
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            results[k] = backend.infer_batch(texts[k * 24 : (k + 1) * 24]).outputs
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    out = np.concatenate([results[k] for k in range(4)])
    assert _cosine(out, reference).min() >= 0.999


def test_empty_and_bad_input(backend: TritonEmbeddingBackend) -> None:
    assert backend.infer_batch([]).outputs.shape == (0, 384)
    with pytest.raises(InvalidInputError):
        backend.infer_batch(["ok", None])  # type: ignore[list-item]


# -- (d) unknown model, (e) short deadline ----------------------------------------------


def test_unknown_model_fails_load_fast(server: TritonServer) -> None:
    backend = TritonEmbeddingBackend(_config(server, model_name="no-such-model"))
    started = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        backend.load()
    assert time.monotonic() - started < 5.0
    assert not backend.loaded


def test_unknown_model_version_is_not_retried(backend: TritonEmbeddingBackend) -> None:
    # The model vanished (or a version was asked for) after load: the server answers
    # NOT_FOUND, which no retry can fix, and which says nothing bad about the server.
    backend.triton_config = replace(backend.triton_config, model_version="7")
    before = replace(backend.stats)
    with pytest.raises(ModelNotFoundError, match="version 7") as info:
        backend.infer_batch(["one short text"])
    assert backend.stats.attempts == before.attempts + 1
    assert backend.stats.retries == before.retries
    assert info.value.__cause__ is not None  # chained to tritonclient's exception
    assert backend.breaker.state == "closed"


def test_too_short_deadline_raises_backend_timeout(
    backend: TritonEmbeddingBackend, texts: list[str]
) -> None:
    backend.triton_config = replace(backend.triton_config, timeout_s=0.001)
    before = replace(backend.stats)
    with pytest.raises(BackendTimeoutError, match="DEADLINE_EXCEEDED") as info:
        backend.infer_batch(texts[:16])
    assert "DEADLINE_EXCEEDED" in str(info.value.__cause__)
    assert backend.stats.retries - before.retries == backend.triton_config.max_retries


# -- (b) kill mid-stream, (c) restart on the same port ----------------------------------


@dataclass
class Stream:
    """Calls ``infer_batch`` in a thread and records each outcome with its time."""

    backend: TritonEmbeddingBackend
    texts: list[str]
    outcomes: list[tuple[float, float, object]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for _ in range(2000):  # bounded, whatever happens
            if self.stop.is_set():
                return
            started = time.monotonic()
            try:
                self.backend.infer_batch(self.texts)
                outcome: object = "ok"
            except BackendError as e:
                outcome = e
            self.outcomes.append((started, time.monotonic(), outcome))
            if outcome != "ok":
                time.sleep(0.05)

    def wait_for(self, predicate: object, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return True
            time.sleep(0.05)
        return False


def test_kill_mid_stream_then_fail_fast(
    server: TritonServer, backend: TritonEmbeddingBackend, texts: list[str]
) -> None:
    stream = Stream(backend, texts[:64])
    worker = threading.Thread(target=stream.run, daemon=True)
    worker.start()
    try:
        assert stream.wait_for(lambda: len(stream.outcomes) >= 2, 60), "no successful calls"
        assert server.pid is not None
        mapped = _group_shm_segments(server.pid)
        killed_at = time.monotonic()
        server.kill()
        # A killed PyTriton cannot unlink its shared memory; the launcher does.
        assert mapped and not [p for p in mapped if p.exists()]
        assert stream.wait_for(
            lambda: sum(isinstance(o, CircuitOpenError) for _, _, o in stream.outcomes) >= 3, 60
        ), f"breaker never opened: {stream.outcomes[-5:]}"
    finally:
        stream.stop.set()
        worker.join(timeout=60)
    after = [(s, e, o) for s, e, o in stream.outcomes if e > killed_at]
    errors = [o for _, _, o in after if o != "ok"]
    assert errors, "no call failed after the kill"
    # At most the call in flight at the kill may still have completed.
    assert sum(o == "ok" for _, _, o in after) <= 1
    for error in errors:
        assert isinstance(error, BackendUnavailableError), repr(error)  # CircuitOpenError included
    first_error_at = min(e for _, e, o in after if o != "ok")
    assert first_error_at - killed_at < 15.0  # retries are bounded
    assert backend.stats.retries > 0
    # Once open, the breaker answers without touching the network.
    fast = [e - s for s, e, o in after if isinstance(o, CircuitOpenError)]
    assert max(fast) < 0.5
    assert backend.breaker.times_opened >= 1


def test_restart_on_same_port_and_recover_without_a_new_backend(
    server: TritonServer, backend: TritonEmbeddingBackend, texts: list[str], reference: np.ndarray
) -> None:
    port = server.options.grpc_port
    server.kill()
    with pytest.raises(BackendUnavailableError):
        backend.infer_batch(texts[:8])
    server.start()
    assert server.options.grpc_port == port
    deadline = time.monotonic() + 30.0
    out: np.ndarray | None = None
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            out = backend.infer_batch(texts).outputs
            break
        except BackendUnavailableError as e:  # breaker still open or channel reconnecting
            last = e
            time.sleep(0.2)
    assert out is not None, f"backend did not recover within 30 s: {last}"
    assert _cosine(out, reference).min() >= 0.999
    assert backend.breaker.state == "closed"


# -- server lifecycle -------------------------------------------------------------------


def test_pid_file_and_port_in_use(server: TritonServer) -> None:
    if not server.is_running():
        server.start()
    assert server.pid_path.is_file()
    clash = TritonServer(
        replace(server.options, run_dir=server.run_dir.parent / "clash"),
        progress=lambda _: None,
    )
    with pytest.raises(SetupError, match="in use"):
        clash.start()
    assert not clash.is_running()


def test_failed_start_reports_the_log_tail(
    server: TritonServer, artifacts: ModelArtifacts, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    for name in ("manifest.json", "tokenizer.json"):
        (broken / name).write_bytes((artifacts.root / name).read_bytes())
    (broken / "model.onnx").write_bytes(b"not an onnx graph")
    options = replace(
        server.options,
        model=ModelConfig(dir=str(broken)),
        grpc_port=free_port(),
        http_port=free_port(),
        metrics_port=free_port(),
        run_dir=tmp_path / "run",
    )
    failing = TritonServer(options, progress=lambda _: None)
    started = time.monotonic()
    with pytest.raises(SetupError, match="exited with code") as info:
        failing.start()
    assert time.monotonic() - started < 60
    assert "model.onnx" in str(info.value)  # the log tail names the cause
    assert not failing.is_running() and not failing.pid_path.exists()


def test_stop_is_graceful_and_removes_the_pid_file(server: TritonServer) -> None:
    if not server.is_running():
        server.start()
    pid = server.pid
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < server.options.stop_timeout_s + 5
    assert not server.is_running() and not server.pid_path.exists()
    assert pid is not None and not Path(f"/proc/{pid}").exists()
