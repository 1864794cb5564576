"""A zero-cost stand-in for the embedding model, to measure the framework without it.

On a GPU the model takes almost none of an event's time, so the data path (Kafka, the
hop into the Python worker, parsing, tokenising, encoding, the sink) sets the rate.
``flinkai bench ceiling`` measures that path with this model: a real ONNX graph with
the exported model's inputs, output name and shape, loaded by the real ORT backend
through a real artifact folder (manifest, tokenizer, Triton repository), whose only
compute is one tiny matmul per batch.

The output is not an embedding: row i is ``tokens_i * w`` for a fixed ``w``, so the
vector still depends on its input (a row cannot be served from the wrong event
without the bench noticing a changed value).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from flinkai.models.artifacts import (
    INPUT_NAMES,
    MODEL_FILE,
    OUTPUT_NAME,
    TOKENIZER_FILE,
    ModelArtifacts,
    build_manifest,
    load_artifacts,
    write_manifest,
)
from flinkai.models.errors import ArtifactError
from flinkai.staging import staged_dir

__all__ = ["NULL_MODEL_NAME", "build_null_model", "null_vector"]

NULL_MODEL_NAME = "null-embedder"
_OPSET = 17


def null_vector(tokens: int, dim: int) -> np.ndarray:
    """What the null model returns for a text of ``tokens`` tokens (tests check it)."""
    return np.full(dim, tokens / np.sqrt(dim), dtype=np.float32)


def _graph_bytes(dim: int) -> bytes:
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:  # onnx comes with the torch extra (export tooling)
        raise ArtifactError(
            "building the null model needs the onnx package: pip install 'flinkai[torch]'"
        ) from e
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in INPUT_NAMES
    ]
    output = helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", dim])
    weights = numpy_helper.from_array(
        np.full((1, dim), 1.0 / np.sqrt(dim), dtype=np.float32), name="w"
    )
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), name="axes")
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["mask_f", "axes"], ["tokens"], keepdims=1),
        helper.make_node("MatMul", ["tokens", "w"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(nodes, NULL_MODEL_NAME, inputs, [output], [weights, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8  # readable by every onnxruntime the project pins
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def build_null_model(source: ModelArtifacts, dest: Path) -> ModelArtifacts:
    """Write a null model folder at ``dest`` beside ``source``'s tokenizer; return it loaded.

    Args:
        source: The real exported model: its tokenizer, dim and truncation are kept, so
            tokenising costs what it costs in production.
        dest: Folder to (re)create; it ends up a complete, checksummed artifact folder.

    Returns:
        The loaded artifacts; ``ModelConfig(name=NULL_MODEL_NAME, dir=str(dest))`` loads it.
    """
    from flinkai.models.export import write_triton_repository

    dest = Path(dest)
    with staged_dir(dest, prefix=".null-") as stage:
        work = stage.path
        (work / MODEL_FILE).write_bytes(_graph_bytes(source.dim))
        shutil.copy2(source.tokenizer_path, work / TOKENIZER_FILE)
        write_triton_repository(work, NULL_MODEL_NAME, source.dim, "cpu")
        manifest = build_manifest(
            work,
            name=NULL_MODEL_NAME,
            dim=source.dim,
            max_seq_length=source.max_seq_length,
            source={
                "model": "null (flinkai_bench.research.null_model)",
                "tokenizer_of": source.model_version,
            },
            opset=_OPSET,
            extra={"pooling": "none", "normalized": False},
        )
        write_manifest(work, manifest)
    from flinkai.config import ModelConfig

    return load_artifacts(
        ModelConfig(
            name=NULL_MODEL_NAME,
            dir=str(dest),
            dim=source.dim,
            max_seq_length=source.max_seq_length,
        )
    )
