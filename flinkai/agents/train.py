"""Training the risk models offline: LightGBM, converted to ONNX (needs the ``risk`` extra).

For each model (fraud on ``creditcard_fraud.csv``, credit on ``credit_default.csv``):

1. a stratified split with a fixed seed: 60 % train, 20 % validation, 20 % test;
2. gradient-boosted trees (LightGBM, deterministic mode, one thread) fit on train only;
3. the decision threshold is the one with the best F1 on the *validation* split;
4. AUC, and recall and precision at that threshold, are measured on the *test* split,
   which neither the fit nor the threshold saw;
5. the model is converted to ONNX (onnxmltools) and checked against LightGBM on the test
   rows; the ONNX file's hash is its version.

The same data and seed give byte-identical ONNX files (the graph name, random by
default, is fixed), hence the same versions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.agents.data import (
    CREDIT_FEATURES,
    FRAUD_FEATURES,
    default_credit_file,
    default_fraud_file,
    labels,
    read_table,
)
from flinkai.agents.errors import RiskModelError
from flinkai.agents.models import MANIFEST_FILE, file_version, risk_models_dir
from flinkai.errors import require

__all__ = [
    "ModelReport",
    "Split",
    "TrainOptions",
    "best_f1_threshold",
    "stratified_split",
    "train_risk_models",
]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
#: Highest opset onnxmltools' LightGBM converter writes.
OPSET = 15
#: Largest |ONNX - LightGBM| probability difference accepted on the test rows.
MAX_ONNX_DIFF = 1e-4


@dataclass(frozen=True)
class TrainOptions:
    """Settings shared by both models.

    Attributes:
        seed: Split and LightGBM seed.
        n_estimators: Trees.
        learning_rate: Shrinkage.
        num_leaves: Leaves per tree.
        val_fraction: Share of each class for the validation split.
        test_fraction: Share of each class for the test split.
    """

    seed: int = 7
    n_estimators: int = 300
    learning_rate: float = 0.05
    num_leaves: int = 31
    val_fraction: float = 0.2
    test_fraction: float = 0.2


@dataclass(frozen=True)
class Split:
    """Row indices of the three parts."""

    train: I64
    val: I64
    test: I64


@dataclass
class ModelReport:
    """What one model scored; written into the manifest.

    Attributes:
        rows: Rows per split (train, val, test).
        positives: Positive rows per split.
        threshold: Chosen on the validation split (best F1).
        val: Validation AUC / recall / precision / F1 at the threshold.
        test: Test AUC / recall / precision / F1 at the threshold.
        max_onnx_diff: Largest probability difference ONNX vs LightGBM on test rows.
    """

    name: str
    file: str
    version: str
    features: tuple[str, ...]
    threshold: float
    data: str
    rows: dict[str, int] = field(default_factory=dict)
    positives: dict[str, int] = field(default_factory=dict)
    val: dict[str, float] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)
    max_onnx_diff: float = 0.0


def stratified_split(y: I64, options: TrainOptions) -> Split:
    """Per class, a seeded shuffle cut into test, validation and train parts."""
    rng = np.random.default_rng(options.seed)
    parts: dict[str, list[I64]] = {"train": [], "val": [], "test": []}
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        n_test = round(len(idx) * options.test_fraction)
        n_val = round(len(idx) * options.val_fraction)
        parts["test"].append(idx[:n_test])
        parts["val"].append(idx[n_test : n_test + n_val])
        parts["train"].append(idx[n_test + n_val :])
    return Split(*(np.sort(np.concatenate(parts[k])) for k in ("train", "val", "test")))


def _rates(y: I64, scores: npt.NDArray[np.float64], threshold: float) -> dict[str, float]:
    pred = scores >= threshold
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    recall = tp / (tp + fn) if tp + fn else 0.0
    precision = tp / (tp + fp) if tp + fp else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"recall": recall, "precision": precision, "f1": f1}


def best_f1_threshold(y: I64, scores: npt.NDArray[np.float64]) -> float:
    """The score threshold with the highest F1 (ties: the higher threshold)."""
    best, best_f1 = 0.5, -1.0
    for t in np.unique(scores):
        f1 = _rates(y, scores, float(t))["f1"]
        if f1 >= best_f1:
            best, best_f1 = float(t), f1
    return best


def _metrics(y: I64, scores: npt.NDArray[np.float64], threshold: float) -> dict[str, float]:
    from sklearn.metrics import roc_auc_score

    return {"auc": float(roc_auc_score(y, scores)), **_rates(y, scores, threshold)}


def _train_one(
    name: str,
    x: F32,
    y: I64,
    features: Sequence[str],
    data: Path,
    out: Path,
    options: TrainOptions,
) -> ModelReport:
    lgb = require("lightgbm", "risk")
    onnxmltools = require("onnxmltools", "risk")
    from onnxmltools.convert.common.data_types import FloatTensorType

    split = stratified_split(y, options)
    model = lgb.LGBMClassifier(  # type: ignore[attr-defined]
        n_estimators=options.n_estimators,
        learning_rate=options.learning_rate,
        num_leaves=options.num_leaves,
        random_state=options.seed,
        deterministic=True,
        force_row_wise=True,
        n_jobs=1,
        verbose=-1,
    )
    model.fit(x[split.train], y[split.train])
    val_scores = model.predict_proba(x[split.val])[:, 1]
    threshold = best_f1_threshold(y[split.val], val_scores)
    test_scores = model.predict_proba(x[split.test])[:, 1]
    onx = onnxmltools.convert_lightgbm(  # type: ignore[attr-defined]
        model,
        initial_types=[("x", FloatTensorType([None, len(features)]))],
        zipmap=False,
        target_opset=OPSET,
    )
    onx.graph.name = f"flinkai-risk-{name}"  # random by default: the file hash is the version
    path = out / f"{name}.onnx"
    path.write_bytes(onx.SerializeToString())
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    onnx_scores = session.run(["probabilities"], {"x": x[split.test]})[0][:, 1]
    diff = float(np.max(np.abs(onnx_scores - test_scores)))
    if diff > MAX_ONNX_DIFF:
        raise RiskModelError(f"{name}: ONNX differs from LightGBM by {diff:.2e} on test rows")
    return ModelReport(
        name=name,
        file=path.name,
        version=file_version(name, path),
        features=tuple(features),
        threshold=threshold,
        data=str(data),
        rows={k: len(getattr(split, k)) for k in ("train", "val", "test")},
        positives={k: int(y[getattr(split, k)].sum()) for k in ("train", "val", "test")},
        val=_metrics(y[split.val], val_scores, threshold),
        test=_metrics(y[split.test], test_scores.astype(np.float64), threshold),
        max_onnx_diff=diff,
    )


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("lightgbm", "onnxmltools", "onnx", "onnxruntime", "scikit-learn", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def train_risk_models(
    out: Path | None = None,
    fraud_file: Path | None = None,
    credit_file: Path | None = None,
    options: TrainOptions | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Train, convert and check both models; write them and ``manifest.json`` to ``out``.

    Returns:
        The manifest written.

    Raises:
        RiskDataError: A data file is missing or malformed.
        RiskModelError: Conversion failed or ONNX does not match LightGBM.
        MissingDependencyError: The ``risk`` extra is not installed.
    """
    options = options or TrainOptions()
    out = out or risk_models_dir()
    out.mkdir(parents=True, exist_ok=True)
    fraud_path, credit_path = (
        fraud_file or default_fraud_file(),
        credit_file or default_credit_file(),
    )
    started = time.perf_counter()
    reports = []
    for name, path, features, label in (
        ("fraud", fraud_path, FRAUD_FEATURES, "Class"),
        ("credit", credit_path, CREDIT_FEATURES, "target"),
    ):
        progress(f"{name}: reading {path}")
        table = read_table(path, (*features, label))
        report = _train_one(name, table.select(features), labels(table, label), features,
                            path, out, options)  # fmt: skip
        progress(f"{name}: {report.version}, threshold {report.threshold:.4f}")
        reports.append(report)
    manifest = {
        "format": 1,
        "options": asdict(options),
        "libraries": _versions(),
        "split": "stratified per class, seeded: train fits, validation picks the threshold "
        "(best F1), test is scored once",
        "models": {r.name: asdict(r) for r in reports},
        "seconds": round(time.perf_counter() - started, 2),
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                     encoding="utf-8")  # fmt: skip
    return manifest
