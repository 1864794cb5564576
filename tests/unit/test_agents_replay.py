"""Risk decisions replay identically: same events and same account state, same decisions.

Real models (LightGBM trained on the shared risk data, run in ONNX Runtime) and the
operator's Flink-free per-event function. A negative control shows that losing the
account state would change decisions, so the comparisons can fail.
"""

from __future__ import annotations

import base64
import csv
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flinkai.agents.data import (
    Table,
    load_accounts,
    transaction_events,
)
from flinkai.agents.graph import RiskGraph
from flinkai.agents.models import RiskModels
from flinkai.agents.train import TrainOptions, best_f1_threshold, stratified_split
from flinkai.operators.agents import DECISION_FIELDS, process_transaction

N_ACCOUNTS = 4
N_EVENTS = 240
SMALL = TrainOptions(n_estimators=30)  # as conftest.SMALL_RISK, which trained model_dir


@pytest.fixture(scope="module")
def data(risk_data: tuple[Table, Table]) -> tuple[Table, Table]:
    return risk_data


@pytest.fixture(scope="module")
def model_dir(small_risk_models: Path) -> Path:
    return small_risk_models


@pytest.fixture(scope="module")
def accounts_file(tmp_path_factory: pytest.TempPathFactory, data: tuple[Table, Table]) -> Path:
    """The first client rows as accounts, with limits low enough for the 24 h spend to bind."""
    _, clients = data
    path = tmp_path_factory.mktemp("accounts") / "accounts.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(clients.columns)
        for row in clients.values[:N_ACCOUNTS]:
            row = row.copy()
            row[clients.columns.index("LIMIT_BAL")] = 500.0
            w.writerow([repr(float(v)) for v in row])
    return path


def _rows(data: tuple[Table, Table]) -> list[tuple[Any, ...]]:
    fraud, clients = data
    few = Table(clients.columns, clients.values[:N_ACCOUNTS])
    events = list(transaction_events(fraud, few, limit=N_EVENTS))
    events[17] = {**events[17], "account_id": "no-such-account"}
    rows = [(e["account_id"], base64.b64encode(json.dumps(e).encode()).decode(), 0, i)
            for i, e in enumerate(events)]  # fmt: skip
    rows[33] = (rows[33][0], base64.b64encode(b'{"tx_id": "x"}').decode(), 0, 33)
    return rows


def _run(
    rows: list[tuple[Any, ...]],
    graph: RiskGraph,
    accounts: dict[str, Any],
    states: dict[str, Any] | None = None,
) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    states = {} if states is None else states
    out = []
    for row in rows:
        result, snap = process_transaction(states.get(row[0]), row, graph, accounts)
        if snap is not None:
            states[row[0]] = snap
        out.append(result)
    return out, states


def test_replay_from_a_restored_state_matches_an_uninterrupted_run(
    data: tuple[Table, Table], model_dir: Path, accounts_file: Path
) -> None:
    rows = _rows(data)
    accounts = load_accounts(accounts_file)
    want, final = _run(rows, RiskGraph.from_models(RiskModels(model_dir)), accounts)
    field = {name: i for i, name in enumerate(DECISION_FIELDS)}
    decided = [r for r in want if r[field["error_reason"]] is None]
    reasons = {c for r in decided for c in r[field["reasons"]]}
    # The stream exercises every branch, or the comparison below proves little.
    assert {"fraud_high", "unknown_account", "credit_ok", "within_limit", "over_limit"} <= reasons
    assert want[33][field["error_reason"]] == "missing_field"

    again, final_again = _run(rows, RiskGraph.from_models(RiskModels(model_dir)), accounts)
    assert again == want and final_again == final

    # Interrupted at k: the state goes through bytes as Flink stores it, the models and
    # graph are loaded afresh (a new worker), and the rest of the stream is replayed.
    k = 150
    first, states = _run(rows[:k], RiskGraph.from_models(RiskModels(model_dir)), accounts)
    restored = pickle.loads(pickle.dumps(states))
    rest, _ = _run(rows[k:], RiskGraph.from_models(RiskModels(model_dir)), accounts, restored)
    assert first + rest == want

    # Negative control: the same replay without the account state decides differently.
    lost, _ = _run(rows[k:], RiskGraph.from_models(RiskModels(model_dir)), accounts)
    assert lost != want[k:]


def test_training_is_reproducible(model_dir: Path, tmp_path: Path) -> None:
    from flinkai.agents.train import train_risk_models

    manifest = train_risk_models(tmp_path, options=SMALL)
    first = json.loads((model_dir / "manifest.json").read_text())
    for name in ("fraud", "credit"):
        assert (tmp_path / f"{name}.onnx").read_bytes() == (model_dir / f"{name}.onnx").read_bytes()
        assert manifest["models"][name]["version"] == first["models"][name]["version"]
        assert manifest["models"][name]["test"] == first["models"][name]["test"]


def test_split_parts_are_disjoint_and_stratified() -> None:
    y = np.array([0] * 90 + [1] * 10, dtype=np.int64)
    s = stratified_split(y, TrainOptions())
    parts = [set(s.train), set(s.val), set(s.test)]
    assert sum(len(p) for p in parts) == 100 and len(set().union(*parts)) == 100
    assert [int(y[list(p)].sum()) for p in parts] == [6, 2, 2]


def test_threshold_maximises_f1_on_the_given_scores() -> None:
    y = np.array([0, 0, 1, 1, 0], dtype=np.int64)
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.2])
    assert best_f1_threshold(y, scores) == 0.35
