"""Publish crashes at every step in a real subprocess; readers and hot swap see old or new.

Each crash test runs ``ModelRegistry.publish`` in a child process that kills itself
(``os._exit`` or SIGKILL) when the ``crash_at`` hook reaches one step. The parent then
checks what a fresh reader sees, what a hot-swapping backend loaded before the crash
does, and that the next publish cleans the debris. A killed process keeps its page
cache, so these tests cover the rename protocol, not the fsyncs (see
``docs/model-registry.md``). The last test hot-swaps the real exported ONNX model.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.hotswap import (
    HotSwappingBackend,
    artifact_dir_factory,
    hot_swapping_backend,
)
from flinkai.config import Config, ModelConfig, OnnxConfig
from flinkai.models.artifacts import MODEL_FILE, ModelArtifacts, load_artifacts
from flinkai.models.errors import ArtifactError
from flinkai.models.registry import (
    CRASH_POINTS,
    POINTER_FILE,
    ModelRegistry,
    PublishedModel,
    RegistryConfig,
)

pytestmark = pytest.mark.integration

NAME = "crashy"
CHILD_TIMEOUT_S = 60
REPO = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from flinkai.models.registry import ModelRegistry

    root, name, src, point, how = sys.argv[1:6]

    def crash(step):
        if step == point:
            print(f"crashing at {step}", flush=True)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)

    ModelRegistry(root, crash_at=crash).publish(name, Path(src), progress=lambda s: None)
    print("published", flush=True)
    """
)

#: Steps after which CURRENT names the new version.
_NEW_AFTER = {"after_pointer_swap"}


def _run_child(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )


def _source(root: Path, seed: str) -> Path:
    root.mkdir(parents=True)
    # Over 1 MiB, so ``mid_write`` leaves a partial file behind.
    (root / "model.bin").write_bytes(hashlib.sha256(seed.encode()).digest() * 100_000)
    (root / "tokenizer.json").write_text(f'{{"seed": "{seed}"}}')
    (root / "sub").mkdir()
    (root / "sub" / "config.txt").write_text(seed)
    return root


def _same_content(published: PublishedModel, src: Path) -> bool:
    return all(
        (published.path / rel).read_bytes() == (src / rel).read_bytes()
        for rel in ("model.bin", "tokenizer.json", "sub/config.txt")
    )


class _TagBackend(EmbeddingBackend):
    """Returns one row per text with the first bytes of the version's model file."""

    name = "tag"

    def __init__(self, published: PublishedModel) -> None:
        super().__init__()
        self.published = published
        self.dim = 4

    def load(self) -> None:
        self.tag = np.frombuffer(self.published.file("model.bin").read_bytes()[:16], np.float32)

    def _infer(self, batch: Sequence[str]) -> np.ndarray:
        return np.tile(self.tag, (len(batch), 1))


@pytest.mark.parametrize("how", ["exit", "kill"])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_each_step_leaves_old_or_new_complete(
    tmp_path: Path, point: str, how: str
) -> None:
    root = tmp_path / "registry"
    old_src = _source(tmp_path / "old", "old")
    new_src = _source(tmp_path / "new", "new")
    old = ModelRegistry(root).publish(NAME, old_src)
    serving = HotSwappingBackend(ModelRegistry(root), NAME, _TagBackend, poll_interval_s=0.0)
    serving.load()

    child = _run_child(str(root), NAME, str(new_src), point, how)
    assert f"crashing at {point}" in child.stdout, child.stdout + child.stderr
    assert child.returncode == (-9 if how == "kill" else 3), child.stderr

    # A fresh reader, hashing every file: the old version or the new one, complete.
    seen = ModelRegistry(root).current(NAME, verify="always")
    if point in _NEW_AFTER:
        assert seen.version != old.version
        assert _same_content(seen, new_src)
    else:
        assert seen.version == old.version
        assert _same_content(seen, old_src)

    # What the crash left behind, and that readers skip it.
    versions = root / NAME / "versions"
    debris = sorted(p.name for p in versions.iterdir() if p.name.startswith(".tmp-"))
    before_rename = CRASH_POINTS.index(point) <= CRASH_POINTS.index("before_rename")
    assert len(debris) == (1 if before_rename else 0), debris
    if point == "mid_write":
        partial = versions / debris[0] / "model.bin"
        assert 0 < partial.stat().st_size < (new_src / "model.bin").stat().st_size
    complete = [r.version for r in ModelRegistry(root).list_versions(NAME, verify=True)]
    assert len(complete) == (1 if before_rename else 2)
    assert all(r.problem is None for r in ModelRegistry(root).list_versions(NAME, verify=True))
    assert (root / NAME / f"{POINTER_FILE}.tmp").exists() == (point == "before_pointer_rename")

    # The UDF side: no failed batch, and the new version only once CURRENT names it.
    vectors, label = serving.infer_batch(["a", "b"])
    assert vectors.shape == (2, 4)
    assert label == f"{NAME}@{seen.version}"
    assert serving.stats.rejections == 0
    assert serving.stats.swaps == (1 if point in _NEW_AFTER else 0)

    # The next publish cleans up and succeeds.
    again = ModelRegistry(root).publish(NAME, new_src)
    assert _same_content(ModelRegistry(root).current(NAME, verify="always"), new_src)
    assert not [p for p in versions.iterdir() if p.name.startswith(".")]
    assert not (root / NAME / f"{POINTER_FILE}.tmp").exists()
    assert serving.infer_batch(["c"])[1] == again.model_version
    serving.close()


def test_concurrent_publisher_processes(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    sources = [_source(tmp_path / f"src{i}", f"s{i}") for i in range(4)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), NAME, str(src), "none", "exit"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for src in sources
    ]
    for child in children:
        out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
        assert child.returncode == 0, err
        assert "published" in out

    reg = ModelRegistry(root)
    rows = reg.list_versions(NAME, verify=True)
    assert [r.sequence for r in rows] == [1, 2, 3, 4]
    assert all(r.problem is None for r in rows)
    # The last writer to hold the lock numbered its version last and swapped CURRENT last.
    assert rows[-1].current
    current = reg.current(NAME, verify="always")
    assert any(_same_content(current, src) for src in sources)


# -- the real model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_artifacts() -> ModelArtifacts:
    try:
        return load_artifacts(ModelConfig())
    except ArtifactError as e:
        pytest.skip(f"no exported ONNX model ({e})")


class _Recording:
    def __init__(self, config: Config) -> None:
        self.inner = artifact_dir_factory(config)
        self.built: list[EmbeddingBackend] = []

    def __call__(self, published: PublishedModel) -> EmbeddingBackend:
        backend = self.inner(published)
        self.built.append(backend)
        return backend


def test_onnx_model_published_twice_and_hot_swapped(
    tmp_path: Path, onnx_artifacts: ModelArtifacts
) -> None:
    from flinkai.backends.onnx import OnnxEmbeddingBackend

    name = onnx_artifacts.name
    reg = ModelRegistry(tmp_path / "registry")
    exported = reg.publish(name, onnx_artifacts.root)
    # Without --version an exported model keeps its version: rows look the same either way.
    assert exported.model_version == onnx_artifacts.model_version
    reg.publish(name, onnx_artifacts.root, version="v1")
    config = Config(onnx=OnnxConfig(intra_op_threads=2))
    factory = _Recording(config)
    backend = hot_swapping_backend(
        config, RegistryConfig(root=str(reg.root), poll_interval_s=0.0), factory=factory
    )
    texts = ["A fox jumps over the lazy dog.", "Stocks rallied after the report.", "ok"]
    with OnnxEmbeddingBackend(config) as direct:
        want = direct.infer_batch(texts).outputs

    with backend:
        vectors1, label1 = backend.infer_batch(texts)
        assert label1 == f"{name}@v1"
        assert vectors1.shape == (3, onnx_artifacts.dim)
        np.testing.assert_allclose(vectors1, want, atol=1e-5)

        reg.publish(name, onnx_artifacts.root, version="v2")
        vectors2, label2 = backend.infer_batch(texts)
        assert label2 == f"{name}@v2"
        np.testing.assert_allclose(vectors2, want, atol=1e-5)
        first = factory.built[0]
        assert isinstance(first, OnnxEmbeddingBackend)
        assert not first.loaded, "the v1 session is closed after the swap"

        # A damaged model (same size, one byte flipped) is rejected; v2 keeps serving.
        v3 = reg.publish(name, onnx_artifacts.root, version="v3")
        model = v3.path / MODEL_FILE
        with model.open("r+b") as f:
            f.seek(os.path.getsize(model) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        vectors3, label3 = backend.infer_batch(texts)
        assert label3 == f"{name}@v2"
        np.testing.assert_allclose(vectors3, want, atol=1e-5)
        assert backend.stats.rejections == 1
        assert "sha256" in str(backend.stats.last_rejection)
