"""Reference runs for checking artifacts before they are installed.

Export compares the ONNX model with sentence-transformers, and quantisation compares
int8 with fp32. Both need to run a model, but not a serving one: a raw ONNX Runtime
session over the files being checked, and the source model itself. Serving goes
through :mod:`flinkai.backends`, which imports this package, never the reverse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.errors import require
from flinkai.models.tokens import plan_sub_batches

__all__ = ["embed_with", "raw_session", "sentence_transformers_reference"]


def raw_session(path: Path, threads: int = 0) -> Any:
    """A plain ONNX Runtime session on the CPU (no serving options, no warm-up)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def embed_with(
    session: Any, tokenizer: Any, texts: Sequence[str], output: str, batch_size: int = 32
) -> np.ndarray:
    """Embed ``texts`` with a raw session, length-sorted like the backend does."""
    out = np.empty((len(texts), 0), dtype=np.float32)
    for sub in plan_sub_batches(tokenizer, texts, batch_size, True):
        (vectors,) = session.run([output], sub.feed)
        if out.shape[1] == 0:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[sub.index] = vectors
    return out


def sentence_transformers_reference(
    texts: Sequence[str], model_dir: Path, max_seq_length: int, batch_size: int = 32
) -> np.ndarray:
    """The source model's own L2-normalised embeddings of ``texts`` (needs the ``torch`` extra)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # no model hub is reachable, or wanted
    st: Any = require("sentence_transformers", "torch")
    model = st.SentenceTransformer(str(model_dir), device="cpu")
    model.max_seq_length = max_seq_length
    vectors = model.encode(
        list(texts),
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vectors, dtype=np.float32)
