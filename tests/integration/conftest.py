"""Fixtures shared by the integration tests of one feature."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkai.anomaly.nab import require_nab_folder
from flinkai.anomaly.spec import ModelSpec
from flinkai.anomaly.train import TrainOptions, train_model
from flinkai.datasets import datasets_dir

#: NAB in its layout (``data/<group>/*.csv``, ``combined_windows.json``), as CI has it.
SHARED_NAB = datasets_dir() / "nab"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small hybrid anomaly model trained for a few epochs on realTraffic's probationary rows.

    Trained once per session: the anomaly job tests only need a model whose state
    and scores are real, not a good one.
    """
    pytest.importorskip("torch")
    # CI has the shared subset beside the checkout: its absence fails, never skips.
    require_nab_folder(SHARED_NAB)
    spec = ModelSpec(kind="hybrid", hidden=16, attn_dim=8, heads=2, window=32)
    out = tmp_path_factory.mktemp("anomaly-model") / "hybrid"
    return train_model(
        spec, SHARED_NAB, out, TrainOptions(epochs=2, threads=1), ["realTraffic"]
    ).folder


@pytest.fixture(scope="session")
def risk_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fraud and credit models (30 trees each) trained on the shared risk data, as ONNX.

    Trained once per session: the risk job tests need real models and scores, not the
    best ones (``flinkai model train-risk`` builds those).
    """
    import lightgbm  # noqa: F401  (CI has it: missing, the risk tests fail, never skip)

    from flinkai.agents.data import default_fraud_file
    from flinkai.agents.train import TrainOptions, train_risk_models

    # CI has the shared risk data beside the checkout: its absence fails, never skips.
    if not default_fraud_file().is_file():
        pytest.fail(f"risk data not found at {default_fraud_file()}")
    out = tmp_path_factory.mktemp("risk-models")
    train_risk_models(out, options=TrainOptions(n_estimators=30))
    return out
