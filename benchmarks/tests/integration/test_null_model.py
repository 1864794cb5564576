"""The null model of ``flinkai bench ceiling`` loads through the real ORT backend."""

import numpy as np
import pytest

from flinkai.backends.onnx import OnnxEmbeddingBackend
from flinkai.config import ModelConfig
from flinkai.models.artifacts import ModelArtifacts
from flinkai_bench.research.null_model import NULL_MODEL_NAME, build_null_model, null_vector

pytestmark = pytest.mark.integration


def test_null_model_is_a_real_artifact_folder_whose_output_follows_token_counts(
    model_artifacts: ModelArtifacts, tmp_path
) -> None:
    null = build_null_model(model_artifacts, tmp_path / "null")
    assert null.name == NULL_MODEL_NAME
    assert null.dim == model_artifacts.dim
    assert null.input_names == model_artifacts.input_names
    assert (null.triton_model_dir / "config.pbtxt").is_file()

    texts = ["short", "a somewhat longer text with several more tokens in it", "short"]
    config = ModelConfig(name=NULL_MODEL_NAME, dir=str(tmp_path / "null"), dim=null.dim)
    with OnnxEmbeddingBackend(model=config) as backend:
        out = backend.infer_batch(texts)
    assert out.model_version == null.model_version
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(null.tokenizer_path))
    for text, row in zip(texts, out.outputs, strict=True):
        np.testing.assert_allclose(row, null_vector(len(tok.encode(text).ids), null.dim), rtol=1e-6)
    assert not np.allclose(out.outputs[0], out.outputs[1])  # the vector depends on the event

    # Rebuilding over an existing folder replaces it whole.
    again = build_null_model(model_artifacts, tmp_path / "null")
    assert again.version == null.version
