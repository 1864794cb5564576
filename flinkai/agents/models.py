"""The risk models at run time: ONNX Runtime only (no LightGBM, no training library).

A trained set lives in one folder (default ``$FLINKAI_HOME/models/risk``):

* ``fraud.onnx``: gradient-boosted trees on :data:`~flinkai.agents.data.FRAUD_FEATURES`;
* ``credit.onnx``: gradient-boosted trees on :data:`~flinkai.agents.data.CREDIT_FEATURES`;
* ``manifest.json``: per model its version (``<name>-lgbm-<12 hex of the ONNX file's
  sha256>``), feature names, decision threshold and held-out scores, plus the data
  files and library versions it was built with (:mod:`flinkai.agents.train`).

Both ONNX graphs take ``x`` ``float32 [N, F]`` and return ``probabilities``
``[N, 2]``; the score is the positive class's probability.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flinkai.agents.errors import RiskModelError
from flinkai.paths import models_dir

__all__ = [
    "MANIFEST_FILE",
    "MODEL_NAMES",
    "ModelInfo",
    "OnnxScorer",
    "RiskModels",
    "file_version",
    "read_manifest",
    "risk_models_dir",
]

MANIFEST_FILE = "manifest.json"
MODEL_NAMES = ("fraud", "credit")


def risk_models_dir() -> Path:
    """``$FLINKAI_HOME/models/risk``."""
    return models_dir() / "risk"


def file_version(name: str, path: Path) -> str:
    """``<name>-lgbm-<first 12 hex of the file's sha256>``."""
    return f"{name}-lgbm-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


@dataclass(frozen=True)
class ModelInfo:
    """One model's entry in the manifest.

    Attributes:
        name: ``fraud`` or ``credit``.
        file: ONNX file name inside the folder.
        version: Model version (carried in every decision).
        features: Input names, in order.
        threshold: Scores at or above it are positive (chosen on the validation split).
    """

    name: str
    file: str
    version: str
    features: tuple[str, ...]
    threshold: float


def read_manifest(folder: Path) -> dict[str, Any]:
    """``manifest.json`` of a risk model folder.

    Raises:
        RiskModelError: No manifest, or it is malformed.
    """
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise RiskModelError(
            f"no risk models in {folder}; build them with `flinkai model train-risk`"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise RiskModelError(f"{path}: not JSON: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict):
        raise RiskModelError(f"{path}: no 'models' object")
    return raw


def _info(name: str, raw: Mapping[str, Any], path: Path) -> ModelInfo:
    try:
        return ModelInfo(name, str(raw["file"]), str(raw["version"]),
                         tuple(str(f) for f in raw["features"]), float(raw["threshold"]))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise RiskModelError(f"{path}: malformed entry for model {name!r}: {e}") from e


class OnnxScorer:
    """One binary classifier in ONNX Runtime: features in, positive-class probability out.

    Args:
        folder: The model folder.
        info: The model's manifest entry.

    Raises:
        RiskModelError: The file is missing, does not match its version, or cannot load.
    """

    def __init__(self, folder: Path, info: ModelInfo) -> None:
        import onnxruntime as ort

        path = folder / info.file
        if not path.is_file():
            raise RiskModelError(f"{path} not found; rebuild with `flinkai model train-risk`")
        if file_version(info.name, path) != info.version:
            raise RiskModelError(f"{path} does not match its manifest version {info.version}")
        self.info = info
        options = ort.SessionOptions()
        # One event at a time: splitting a few hundred small trees across threads costs more.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise RiskModelError(f"cannot load {path}: {e}") from e
        width = self._session.get_inputs()[0].shape[1]
        if isinstance(width, int) and width != len(info.features):
            raise RiskModelError(
                f"{path} takes {width} inputs, manifest lists {len(info.features)}"
            )

    def score(self, features: Sequence[float]) -> float:
        """The positive-class probability of one row."""
        return float(self.score_batch(np.asarray([features], dtype=np.float32))[0])

    def score_batch(self, x: np.ndarray) -> np.ndarray:
        """Positive-class probabilities of ``x`` ``float32 [N, F]``."""
        out = self._session.run(["probabilities"], {"x": x.astype(np.float32, copy=False)})
        return np.asarray(out[0])[:, 1]


class RiskModels:
    """Both risk models of one folder, loaded once per worker.

    Args:
        folder: The model folder (default :func:`risk_models_dir`).

    Raises:
        RiskModelError: A model is missing or does not load.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or risk_models_dir()
        self.manifest = read_manifest(self.folder)
        path = self.folder / MANIFEST_FILE
        entries = self.manifest["models"]
        missing = [n for n in MODEL_NAMES if n not in entries]
        if missing:
            raise RiskModelError(f"{path}: no entry for {missing}")
        self.fraud = OnnxScorer(self.folder, _info("fraud", entries["fraud"], path))
        self.credit = OnnxScorer(self.folder, _info("credit", entries["credit"], path))

    @property
    def versions(self) -> dict[str, str]:
        """Model name -> version."""
        return {"fraud": self.fraud.info.version, "credit": self.credit.info.version}
