"""``flinkai model quantize`` on a copy of the exported artifacts (about 30 s of CPU on 2 cores)."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flinkai.backends.onnx import OnnxEmbeddingBackend
from flinkai.config import EmbeddingConfig, ModelConfig, OnnxConfig
from flinkai.datasets import DatasetNotFoundError, load_ag_news
from flinkai.models.artifacts import (
    VARIANT_FILES,
    ArtifactError,
    ChecksumMismatchError,
    load_artifacts,
    read_manifest,
    write_manifest,
)
from flinkai.models.errors import QuantizeError
from flinkai.models.export import SAMPLE_SENTENCES
from flinkai.models.quantize import QuantizeOptions, quantize_model

pytestmark = pytest.mark.integration

N_TEXTS = 100
INT8 = VARIANT_FILES["int8"]


def _texts() -> list[str]:
    try:
        return [t for _, t in load_ag_news()]
    except DatasetNotFoundError:
        return list(SAMPLE_SENTENCES)


@pytest.fixture
def model_config(tmp_path: Path) -> ModelConfig:
    """A private copy of the default artifacts (hard links where possible)."""
    try:
        source = load_artifacts(ModelConfig()).root
    except ArtifactError as e:
        pytest.skip(f"no exported model (run `flinkai model export`): {e}")
    target = tmp_path / "model"

    def link_or_copy(src: str, dst: str) -> None:
        # Quantize only ever renames new files into place, so sharing inodes is safe.
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link_or_copy)
    # The copy is as `flinkai model export` writes it: variants built earlier into the
    # shared cache (`flinkai bench suite` builds int8) are not part of it.
    manifest = read_manifest(target)
    built = {v for k, v in VARIANT_FILES.items() if k != "fp32"}
    for path in built:
        (target / path).unlink(missing_ok=True)
    extra = {k: v for k, v in manifest.extra.items() if k != "variants"}
    files = tuple(f for f in manifest.files if f.path not in built)
    write_manifest(target, replace(manifest, files=files, extra=extra))
    return replace(ModelConfig(), dir=str(target))


def _backend(model_config: ModelConfig, variant: str) -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(
        model=model_config,
        onnx=OnnxConfig(intra_op_threads=2, variant=variant),  # type: ignore[arg-type]
        embedding=EmbeddingConfig(batch_size=32),
    )


def test_quantize_installs_a_verified_int8_variant(model_config: ModelConfig) -> None:
    texts = _texts()
    result = quantize_model(model_config, QuantizeOptions(eval_texts=N_TEXTS), texts=texts)
    assert result.mean_cosine >= 0.99 and not result.below_threshold
    root = Path(model_config.dir)
    assert result.path == root / INT8
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]
    manifest = read_manifest(root)
    entry = manifest.file(INT8)
    assert entry is not None and entry.size == result.size_bytes
    assert manifest.extra["variants"]["int8"]["mean_cosine"] == pytest.approx(
        result.mean_cosine, abs=1e-4
    )

    # Through the runtime path, on texts the quantiser did not evaluate on.
    sample = texts[-N_TEXTS:]
    with _backend(model_config, "fp32") as fp32, _backend(model_config, "int8") as int8:
        reference = fp32.infer_batch(sample).outputs
        vectors = int8.infer_batch(sample).outputs
        assert int8.model_version.endswith("-int8")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    cosine = (reference * vectors).sum(axis=1)
    assert float(cosine.mean()) >= 0.99, f"mean {cosine.mean():.4f}, min {cosine.min():.4f}"

    # A corrupted int8 file (same size, one byte flipped) is rejected by its sha256.
    path = root / INT8
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match="int8"):
        _backend(model_config, "int8").load()


def test_refuses_below_threshold_and_leaves_artifacts_alone(model_config: ModelConfig) -> None:
    root = Path(model_config.dir)
    before = (root / "manifest.json").read_bytes()
    options = QuantizeOptions(per_channel=False, op_types=("MatMul", "Gather"), eval_texts=24)
    with pytest.raises(QuantizeError, match=r"below 0\.99999"):
        quantize_model(model_config, replace(options, min_cosine=0.99999), texts=_texts())
    assert (root / "manifest.json").read_bytes() == before
    assert not (root / INT8).exists()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ArtifactError, match="has not been exported"):
        load_artifacts(model_config).model_file("int8")


def test_unknown_exclude_pattern_is_an_error(model_config: ModelConfig) -> None:
    with pytest.raises(QuantizeError, match="match no node"):
        quantize_model(model_config, QuantizeOptions(exclude=("layer.99/*",)), texts=["a"])


def test_fp16_command_installs_a_loadable_variant_close_to_fp32(
    model_config: ModelConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    from flinkai.cli.main import main

    root = Path(model_config.dir)
    code = main(["model", "quantize", "--fp16", "--dir", str(root), "--eval-texts", "32"])
    assert code == 0, capsys.readouterr().out
    fp16 = root / VARIANT_FILES["fp16"]
    assert fp16.exists() and not (root / INT8).exists()
    manifest = read_manifest(root)
    entry = manifest.file(VARIANT_FILES["fp16"])
    assert entry is not None and entry.size == fp16.stat().st_size
    info = manifest.extra["variants"]["fp16"]
    assert info["precision"] == "fp16" and info["keep_io_types"] is True
    assert info["mean_cosine"] >= 0.999

    texts = _texts()[:16]
    with _backend(model_config, "fp32") as reference, _backend(model_config, "fp16") as half:
        assert half.model_version.endswith("-fp16")
        ref = reference.infer_batch(texts).outputs
        got = half.infer_batch(texts).outputs
    assert got.dtype == np.float32 and got.shape == ref.shape
    cosine = (ref * got).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    assert cosine.min() >= 0.999
