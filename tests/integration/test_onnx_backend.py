"""The exported ONNX model against sentence-transformers, on real AG News texts.

Exports into the default artifact folder once if it is missing (about 30 s with torch).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends import shared
from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.errors import InvalidInputError
from flinkai.backends.factory import create_embedding_backend
from flinkai.backends.onnx import OnnxEmbeddingBackend
from flinkai.config import Config, EmbeddingConfig, ModelConfig, OnnxConfig
from flinkai.datasets import DatasetNotFoundError, load_ag_news
from flinkai.errors import MissingDependencyError
from flinkai.models.artifacts import (
    MODEL_FILE,
    ArtifactError,
    ChecksumMismatchError,
    ModelArtifacts,
    load_artifacts,
)

pytestmark = pytest.mark.integration

DIM = 384
MAX_TOKENS = 256
N_PARITY = 256


@pytest.fixture(scope="session")
def artifacts() -> ModelArtifacts:
    """The default artifacts, exported now if missing or invalid."""
    try:
        return load_artifacts(ModelConfig())
    except ArtifactError:
        pass  # not exported yet (or stale): export below
    try:
        from flinkai.models.export import export_model

        return export_model(ModelConfig()).artifacts
    except MissingDependencyError as e:
        pytest.skip(f"cannot export the model: {e}")


def _config(batch_size: int = 32, *, sort: bool = True) -> Config:
    return Config(
        onnx=OnnxConfig(intra_op_threads=2),
        embedding=EmbeddingConfig(batch_size=batch_size, sort_by_length=sort),
    )


@pytest.fixture(scope="module")
def backend(artifacts: ModelArtifacts) -> Iterator[OnnxEmbeddingBackend]:
    with OnnxEmbeddingBackend(_config()) as b:
        assert isinstance(b, OnnxEmbeddingBackend)
        yield b


@pytest.fixture(scope="module")
def reference() -> Iterator[EmbeddingBackend]:
    try:
        from flinkai.backends.sentence_transformers import SentenceTransformersBackend

        b = SentenceTransformersBackend(_config())
        b.load()
    except MissingDependencyError as e:
        pytest.skip(f"sentence-transformers baseline not available: {e}")
    yield b
    b.close()


@pytest.fixture(scope="module")
def news_texts(backend: OnnxEmbeddingBackend) -> list[str]:
    """N_PARITY AG News texts spread over the whole length range, plus over-long ones."""
    try:
        texts = [t for _, t in load_ag_news()]
    except DatasetNotFoundError as e:
        pytest.skip(f"shared datasets are absent: {e}")
    lengths = np.array([len(e.ids) for e in backend._tokenizer.encode_batch(texts)])
    by_length = np.argsort(lengths, kind="stable")
    picks = by_length[np.linspace(0, len(texts) - 1, N_PARITY).round().astype(int)]
    chosen = [texts[i] for i in picks]
    # Several articles in one text: far past the limit, so truncation must match too.
    chosen.append(" ".join(texts[:12]))
    return chosen


def _tokens_untruncated(backend: OnnxEmbeddingBackend, texts: list[str]) -> np.ndarray:
    tok = backend._tokenizer
    tok.no_truncation()
    try:
        return np.array([len(e.ids) for e in tok.encode_batch(texts)])
    finally:
        tok.enable_truncation(MAX_TOKENS)


def test_artifact_layout(artifacts: ModelArtifacts) -> None:
    assert artifacts.dim == DIM and artifacts.max_seq_length == MAX_TOKENS
    assert artifacts.manifest.opset == 17
    assert (artifacts.triton_model_dir / "config.pbtxt").is_file()
    assert (
        artifacts.triton_model_dir / "1" / MODEL_FILE
    ).stat().st_size == artifacts.model_path.stat().st_size


@pytest.fixture(scope="module")
def news_vectors(backend: OnnxEmbeddingBackend, news_texts: list[str]) -> np.ndarray:
    return backend.infer_batch(news_texts).outputs


def test_matches_sentence_transformers_on_ag_news(
    backend: OnnxEmbeddingBackend,
    reference: EmbeddingBackend,
    news_texts: list[str],
    news_vectors: np.ndarray,
) -> None:
    lengths = _tokens_untruncated(backend, news_texts)
    assert len(news_texts) >= 256
    assert lengths.max() > MAX_TOKENS, "needs a text longer than the truncation limit"
    assert lengths.min() < 32
    got = news_vectors
    want = reference.infer_batch(news_texts).outputs
    assert got.shape == want.shape == (len(news_texts), DIM)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(want, axis=1)
    worst = int(np.argmin(cos))
    assert cos[worst] >= 0.999, f"text {worst} ({lengths[worst]} tokens): cosine {cos[worst]}"


def test_output_order_survives_length_sorting(
    backend: OnnxEmbeddingBackend, news_texts: list[str], news_vectors: np.ndarray
) -> None:
    # Every 4th text: a sample over the whole length range.
    texts, straight = news_texts[::4], news_vectors[::4]
    perm = np.random.default_rng(7).permutation(len(texts))
    shuffled = backend.infer_batch([texts[i] for i in perm]).outputs
    np.testing.assert_allclose(shuffled, straight[perm], atol=1e-4)
    # Unsorted pads to the longest text of each sub-batch: slow, so half the sample.
    with OnnxEmbeddingBackend(_config(sort=False)) as unsorted:
        np.testing.assert_allclose(
            unsorted.infer_batch(texts[::2]).outputs, straight[::2], atol=1e-4
        )


def test_batch_size_does_not_change_results(
    news_texts: list[str], news_vectors: np.ndarray
) -> None:
    texts, batched = news_texts[1::6], news_vectors[1::6]
    with OnnxEmbeddingBackend(_config(batch_size=1)) as single:
        one_by_one = single.infer_batch(texts).outputs
    assert float(np.abs(batched - one_by_one).max()) < 1e-4


def test_empty_batch(backend: OnnxEmbeddingBackend) -> None:
    out = backend.infer_batch([]).outputs
    assert out.shape == (0, DIM) and out.dtype == np.float32


def test_non_text_is_invalid_input(backend: OnnxEmbeddingBackend) -> None:
    with pytest.raises(InvalidInputError, match=r"batch\[1\]"):
        backend.infer_batch(["fine", None])  # type: ignore[list-item]


def test_version_and_cold_start(backend: OnnxEmbeddingBackend, artifacts: ModelArtifacts) -> None:
    assert backend.model_version == f"all-MiniLM-L6-v2@{artifacts.version}"
    assert backend.providers[0] == "CPUExecutionProvider"
    assert {"session_create", "tokenizer_load", "warmup_first_batch"} <= set(
        backend.cold_start.phases_s
    )
    assert backend.batch_size() == 32


def test_corrupted_copy_is_refused(artifacts: ModelArtifacts, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(artifacts.root, copy)
    path = copy / MODEL_FILE
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x01]))
    cfg = ModelConfig(dir=str(copy))
    with pytest.raises(ChecksumMismatchError, match=MODEL_FILE) as info:
        load_artifacts(cfg)
    assert info.value.path == path
    with pytest.raises(ChecksumMismatchError):
        OnnxEmbeddingBackend(model=cfg).load()


def test_shared_backend_is_loaded_once_per_config_and_closed_by_the_last_holder(
    artifacts: ModelArtifacts,
) -> None:
    cfg = _config(batch_size=16)
    before = shared.live_backends()
    first = shared.acquire_embedding_backend(cfg)
    second = shared.acquire_embedding_backend(cfg)
    assert first is second and shared.refs(cfg) == 2
    other = shared.acquire_embedding_backend(_config(batch_size=8))
    assert other is not first and shared.live_backends() == before + 2
    shared.release_embedding_backend(first)
    assert shared.refs(cfg) == 1 and isinstance(first, OnnxEmbeddingBackend) and first.loaded
    shared.release_embedding_backend(second)
    assert shared.refs(cfg) == 0 and not first.loaded
    shared.release_embedding_backend(other)
    assert shared.live_backends() == before
    with pytest.raises(ValueError):
        shared.release_embedding_backend(first)


def test_registry_creates_an_onnx_backend(artifacts: ModelArtifacts) -> None:
    b = create_embedding_backend(_config())
    with b:
        assert b.infer_batch(["hello"]).outputs.shape == (1, DIM)


def test_export_skips_valid_artifacts(artifacts: ModelArtifacts) -> None:
    from flinkai.models.export import export_model

    result = export_model(ModelConfig())
    assert not result.exported
    assert result.artifacts.version == artifacts.version


def test_failed_export_leaves_nothing_behind(
    artifacts: ModelArtifacts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flinkai.models import export

    def crash(torch: object, model: object, source: Path, path: Path) -> None:
        path.write_bytes(b"half a model")
        raise RuntimeError("simulated crash")

    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(export, "_export_onnx", crash)
    # Skip the real weight loading: the crash under test comes after it.
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda *a, **k: _Stub())
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="simulated crash"):
        export.export_model(ModelConfig(), out_dir=target)
    assert list(tmp_path.iterdir()) == []


class _Stub:
    def eval(self) -> _Stub:
        return self


def test_verification_rejects_a_mismatch(artifacts: ModelArtifacts) -> None:
    from flinkai.models.errors import ExportError
    from flinkai.models.export import verify_export

    cfg = replace(ModelConfig(), dir=str(artifacts.root))
    assert verify_export(cfg, texts=("a short text",)) >= 0.999
    with pytest.raises(ExportError, match="cosine"):
        verify_export(cfg, texts=("a short text",), min_cosine=1.5)
