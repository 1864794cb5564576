"""The risk decision graph: every path, pure nodes, the spend window, and event parsing."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence

import pytest

from flinkai.agents.data import V_FIELDS, Account, account_row
from flinkai.agents.graph import GRAPH_VERSION, DecisionState, RiskGraph
from flinkai.agents.transactions import InvalidTransaction, Transaction, parse_transaction
from flinkai.agents.window import DAY_MS, SpendWindow

T0 = 1_796_083_200_000
FEATURES = tuple(float(i) / 10 for i in range(28))


class FixedScorer:
    """A scorer that returns one score and counts its calls."""

    def __init__(self, score: float) -> None:
        self.value = score
        self.calls = 0

    def score(self, features: Sequence[float]) -> float:
        self.calls += 1
        return self.value


def _graph(fraud: float, credit: float) -> tuple[RiskGraph, FixedScorer, FixedScorer]:
    f, c = FixedScorer(fraud), FixedScorer(credit)
    return RiskGraph(f, c, 0.5, 0.3, {"fraud": "fraud-v", "credit": "credit-v"}), f, c


ACCOUNT = Account("7", credit_limit=1000.0, features=(1.0,) * 23)


def test_fraud_over_threshold_declines_without_calling_credit() -> None:
    graph, fraud, credit = _graph(fraud=0.9, credit=0.0)
    d = graph.decide("t1", "7", T0, 10.0, FEATURES, ACCOUNT, 0.0)
    assert (d.approved, d.path, d.reasons) == (False, ("fraud", "decide"), ("fraud_high",))
    assert (fraud.calls, credit.calls) == (1, 0)
    assert d.credit_status == "not_checked" and d.credit_score is None
    assert d.fraud_score == 0.9


def test_approved_path_runs_every_node() -> None:
    graph, _, credit = _graph(fraud=0.1, credit=0.1)
    d = graph.decide("t1", "7", T0, 10.0, FEATURES, ACCOUNT, 500.0)
    assert d.approved
    assert d.path == ("fraud", "credit", "limit", "decide")
    assert d.reasons == ("fraud_ok", "credit_ok", "within_limit")
    assert (d.credit_status, d.credit_score, credit.calls) == ("ok", 0.1, 1)
    assert (d.graph_version, d.fraud_model_version, d.credit_model_version) == (
        GRAPH_VERSION, "fraud-v", "credit-v")  # fmt: skip
    assert (d.spend_24h, d.credit_limit) == (500.0, 1000.0)


def test_unknown_account_is_a_decision_not_an_error() -> None:
    graph, _, credit = _graph(fraud=0.1, credit=0.1)
    d = graph.decide("t1", "nobody", T0, 10.0, FEATURES, None, 0.0)
    assert (d.approved, d.path) == (False, ("fraud", "credit", "decide"))
    assert d.reasons == ("fraud_ok", "unknown_account")
    assert d.credit_status == "unknown_account" and credit.calls == 0


def test_high_credit_risk_declines_before_the_limit() -> None:
    graph, _, _ = _graph(fraud=0.1, credit=0.3)  # at the threshold: high risk
    d = graph.decide("t1", "7", T0, 10.0, FEATURES, ACCOUNT, 0.0)
    assert (d.approved, d.path, d.reasons) == (
        False, ("fraud", "credit", "decide"), ("fraud_ok", "credit_high_risk"))  # fmt: skip


@pytest.mark.parametrize(("spend", "approved"), [(990.0, True), (990.01, False)])
def test_limit_is_spend_plus_amount_against_the_credit_limit(spend: float, approved: bool) -> None:
    graph, _, _ = _graph(fraud=0.1, credit=0.1)
    d = graph.decide("t1", "7", T0, 10.0, FEATURES, ACCOUNT, spend)
    assert d.approved is approved
    assert d.reasons[-1] == ("within_limit" if approved else "over_limit")


def test_nodes_return_new_state_and_leave_theirs_unchanged() -> None:
    graph, _, _ = _graph(fraud=0.1, credit=0.1)
    state: DecisionState = {
        "tx_id": "t", "account_id": "7", "ts_ms": T0, "amount": 1.0, "features": FEATURES,
        "credit_limit": 10.0, "credit_features": (1.0,) * 23, "spend_24h": 0.0,
        "reasons": ["x"], "path": ["p"], "credit_status": "ok",
    }  # fmt: skip
    before = copy.deepcopy(state)
    update = graph.fraud_node(state)
    assert state == before
    assert update["reasons"] == ["x", "fraud_ok"] and update["reasons"] is not state["reasons"]
    update = graph.credit_node(state)
    assert state == before and update["path"] == ["p", "credit"]


def test_mermaid_drawing_has_the_conditional_edges() -> None:
    graph, _, _ = _graph(fraud=0.1, credit=0.1)
    text = graph.draw_mermaid()
    for edge in ("fraud -.-> decide", "fraud -.-> credit", "credit -.-> limit", "limit --> decide"):
        assert edge in text, text


def test_spend_window_slides_on_event_time() -> None:
    w = SpendWindow().add(T0, 100.0).add(T0 + 3_600_000, 50.0)
    assert w.spend(T0 + 3_600_000) == 150.0
    assert w.spend(T0 + DAY_MS - 1) == 150.0
    assert w.spend(T0 + DAY_MS) == 50.0  # the first entry is exactly 24 h old: out
    assert w.spend(T0 - 1) == 0.0  # a late event sees only what came before it
    later = w.add(T0 + DAY_MS + 3_600_000, 1.0)
    assert [t for t, _ in later.entries] == [T0 + DAY_MS + 3_600_000]  # both pruned
    assert SpendWindow.from_snapshot(json.loads(json.dumps(w.snapshot()))) == w
    with pytest.raises(ValueError, match="version"):
        SpendWindow.from_snapshot({"version": 99, "spend": []})


def _event(**changes: object) -> dict[str, object]:
    event: dict[str, object] = {"tx_id": "t1", "account_id": "7", "ts": T0, "amount": 12.5}
    event.update({v: 0.25 for v in V_FIELDS})
    event.update(changes)
    return event


def test_valid_transaction_parses() -> None:
    tx = parse_transaction(json.dumps(_event(V3=-1.5)).encode())
    assert isinstance(tx, Transaction)
    assert (tx.tx_id, tx.account_id, tx.ts_ms, tx.amount) == ("t1", "7", T0, 12.5)
    assert tx.features[2] == -1.5 and len(tx.features) == 28


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "not_json"),
        (b"", "empty_payload"),
        (b"[1]", "not_object"),
        (json.dumps(_event(extra=1)).encode(), "unknown_field"),
        (json.dumps({k: v for k, v in _event().items() if k != "V7"}).encode(), "missing_field"),
        (json.dumps(_event(amount=math.nan)).encode(), "not_finite"),
        (json.dumps(_event(amount=math.inf)).encode(), "not_finite"),
        (json.dumps(_event(V28=-math.inf)).encode(), "not_finite"),
        (json.dumps(_event()).replace('"amount": 12.5', '"amount": 1e999').encode(), "not_finite"),
        (json.dumps(_event(amount=10**400)).encode(), "not_finite"),
        (json.dumps(_event(amount="12")).encode(), "invalid_field"),
        (json.dumps(_event(amount=True)).encode(), "invalid_field"),
        (json.dumps(_event(amount=-1)).encode(), "invalid_field"),
        (json.dumps(_event(ts="yesterday")).encode(), "invalid_field"),
        (json.dumps(_event(account_id="")).encode(), "invalid_field"),
        (json.dumps(_event(account_id=7)).encode(), "invalid_field"),
    ],
)
def test_bad_transactions_get_a_reason(payload: bytes, reason: str) -> None:
    got = parse_transaction(payload)
    assert isinstance(got, InvalidTransaction), got
    assert got.reason == reason, got.detail


def test_account_mapping_is_round_robin_over_client_rows() -> None:
    assert [account_row(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
