"""Fixtures shared by unit tests: the risk data and one small set of trained risk models."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkai.agents.data import (
    CREDIT_FEATURES,
    FRAUD_FEATURES,
    Table,
    default_credit_file,
    default_fraud_file,
    read_table,
)
from flinkai.agents.train import TrainOptions

#: Small enough to train in seconds; the risk tests check logic, not model quality.
SMALL_RISK = TrainOptions(n_estimators=30)


@pytest.fixture(scope="session")
def risk_data() -> tuple[Table, Table]:
    """The fraud file and the credit table; missing, the tests fail (CI has both)."""
    import lightgbm  # noqa: F401  (CI has it: missing, the test fails, never skips)

    assert default_fraud_file().is_file(), f"risk data not found at {default_fraud_file()}"
    fraud = read_table(default_fraud_file(), (*FRAUD_FEATURES, "Time", "Class"))
    clients = read_table(default_credit_file(), ("ID", *CREDIT_FEATURES))
    return fraud, clients


@pytest.fixture(scope="session")
def small_risk_models(
    tmp_path_factory: pytest.TempPathFactory, risk_data: tuple[Table, Table]
) -> Path:
    """Risk models trained once per session with :data:`SMALL_RISK`."""
    from flinkai.agents.train import train_risk_models

    out = tmp_path_factory.mktemp("risk-models")
    train_risk_models(out, options=SMALL_RISK)
    return out
