"""The forecaster's shape and its artifact folder layout (no torch needed).

A trained model lives in ``<models_dir>/anomaly/<name>/``:

* ``step.onnx``: one streaming step (see :mod:`flinkai.anomaly.forecaster`);
* ``model.pt``: the torch weights (for re-export and the equivalence test only);
* ``meta.json``: the :class:`ModelSpec`, the model version and how it was trained.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from flinkai.anomaly.errors import AnomalyModelError
from flinkai.anomaly.features import N_FEATURES
from flinkai.paths import models_dir

__all__ = [
    "META_FILE",
    "ONNX_FILE",
    "TORCH_FILE",
    "ModelKind",
    "ModelMeta",
    "ModelSpec",
    "anomaly_models_dir",
    "read_meta",
    "resolve_model_dir",
]

ONNX_FILE = "step.onnx"
TORCH_FILE = "model.pt"
META_FILE = "meta.json"

ModelKind = Literal["hybrid", "lstm"]


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a forecaster.

    Attributes:
        kind: ``hybrid`` (LSTM, then a causal attention layer over the last
            ``window`` steps, added through a residual) or ``lstm`` (LSTM only).
        hidden: LSTM state size (and model width).
        attn_dim: Width of attention keys and values (all heads together).
        heads: Attention heads.
        window: Steps the attention sees (the KV cache length).
        n_features: Inputs per step.
        gate: ``hybrid`` only: scale the attention and feed-forward residuals by
            learned scalars that start at 0, so training starts from the LSTM-only
            forecaster and attention adds only what lowers the loss.
    """

    kind: ModelKind = "hybrid"
    hidden: int = 32
    attn_dim: int = 16
    heads: int = 2
    window: int = 288
    n_features: int = N_FEATURES
    gate: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("hybrid", "lstm"):
            raise AnomalyModelError(f"model kind must be hybrid or lstm, got {self.kind!r}")
        if min(self.hidden, self.attn_dim, self.heads, self.window, self.n_features) < 1:
            raise AnomalyModelError(f"model sizes must be positive: {self}")
        if self.attn_dim % self.heads:
            raise AnomalyModelError("attn_dim must be a multiple of heads")

    @property
    def has_attention(self) -> bool:
        return self.kind == "hybrid"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ModelSpec:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


@dataclass(frozen=True)
class ModelMeta:
    """``meta.json``: what a step model is and where it came from.

    Attributes:
        spec: The model's shape.
        model_version: ``anomaly-<kind>-<first 12 hex of the ONNX file's sha256>``.
        training: How it was trained (data folder, files, rows, epochs, loss).
    """

    spec: ModelSpec
    model_version: str
    training: Mapping[str, Any]

    def to_json(self) -> str:
        return json.dumps(
            {"spec": asdict(self.spec), "model_version": self.model_version,
             "training": dict(self.training)},
            indent=2,
            sort_keys=True,
        )  # fmt: skip


def anomaly_models_dir() -> Path:
    """``$FLINKAI_HOME/models/anomaly``."""
    return models_dir() / "anomaly"


def resolve_model_dir(name_or_dir: str) -> Path:
    """A model name (``hybrid``, ``lstm``) under :func:`anomaly_models_dir`, or a folder."""
    path = Path(name_or_dir).expanduser()
    if path.is_absolute() or "/" in name_or_dir:
        return path
    return anomaly_models_dir() / name_or_dir


def read_meta(folder: Path) -> ModelMeta:
    """Read ``meta.json`` of a model folder.

    Raises:
        AnomalyModelError: The folder has no model, or its metadata is malformed.
    """
    path = folder / META_FILE
    if not path.is_file() or not (folder / ONNX_FILE).is_file():
        raise AnomalyModelError(
            f"no anomaly model in {folder}; build it with `flinkai model train-anomaly`"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return ModelMeta(ModelSpec.from_dict(raw["spec"]), str(raw["model_version"]),
                         dict(raw.get("training", {})))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise AnomalyModelError(f"{path}: malformed model metadata: {e}") from e
