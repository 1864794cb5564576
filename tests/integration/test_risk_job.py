"""risk_decisions.sql on real parts: Kafka -> MiniCluster -> LangGraph decision operator -> Kafka.

Poison transactions (not JSON, an unknown field, a NaN amount, an infinite feature)
must reach the dead-letter topic with their reason and source offset; an unknown
account must get a decision with reason ``unknown_account``; and every decision must
equal, field for field, what the Flink-free operator function decides for the same
events in the same order per account.
"""

from __future__ import annotations

import base64
import csv
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from flinkai.agents.data import (
    CREDIT_FEATURES,
    FRAUD_FEATURES,
    Table,
    default_credit_file,
    default_fraud_file,
    load_accounts,
    read_table,
    transaction_events,
)
from flinkai.agents.graph import RiskGraph
from flinkai.agents.models import RiskModels
from flinkai.config import load_config
from flinkai.kafka.admin import consume_all, create_topics, produce
from flinkai.kafka.broker import LocalKafka
from flinkai.operators.agents import DECISION_FIELDS, process_transaction
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
N_ACCOUNTS = 3
N_EVENTS = 60


def write_accounts(path: Path, limit: float = 500.0) -> Path:
    """The first client rows as accounts, with a credit limit the 24 h spend can reach."""
    clients = read_table(default_credit_file(), ("ID", *CREDIT_FEATURES))
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(clients.columns)
        for row in clients.values[:N_ACCOUNTS]:
            row = row.copy()
            row[clients.columns.index("LIMIT_BAL")] = limit
            w.writerow([repr(float(v)) for v in row])
    return path


def stream(n: int) -> list[dict[str, Any]]:
    """``n`` transactions of the shared data on the first accounts; one account unknown."""
    fraud = read_table(default_fraud_file(), (*FRAUD_FEATURES, "Time"))
    clients = read_table(default_credit_file(), ("ID", *CREDIT_FEATURES))
    few = Table(clients.columns, clients.values[:N_ACCOUNTS])
    events = list(transaction_events(fraud, few, limit=n))
    events[5] = {**events[5], "account_id": "no-such-account"}
    return events


def expected(
    events: list[dict[str, Any]], models: Path, accounts: Path, reset_after: int = -1
) -> dict[str, dict[str, Any]]:
    """``tx_id -> decision`` of the Flink-free operator function, state kept per account.

    The graph runs in LangGraph's own invoke here, the job in its default plan runtime:
    equal decisions also show the two runtimes agree with the real models.

    ``reset_after``: drop every account's state after this event index (what a restart
    without restored state would do).
    """
    graph = RiskGraph.from_models(RiskModels(models), runtime="langgraph")
    table = load_accounts(accounts)
    states: dict[str, Any] = {}
    out = {}
    for i, e in enumerate(events):
        if reset_after >= 0 and i == reset_after + 1:
            states = {}
        row = (e["account_id"], base64.b64encode(json.dumps(e).encode()).decode(), 0, 0)
        result, snap = process_transaction(states.get(e["account_id"]), row, graph, table)
        if snap is not None:
            states[e["account_id"]] = snap
        out[e["tx_id"]] = dict(zip(DECISION_FIELDS[:15], result[:15], strict=True))
    return out


def test_decisions_and_dead_letters(
    kafka_broker: LocalKafka, risk_models: Path, tmp_path: Path
) -> None:
    events = stream(N_EVENTS)
    accounts = write_accounts(tmp_path / "accounts.csv")
    records = [json.dumps(e).encode() for e in events]
    poison = {
        len(records): "not_json",
        len(records) + 1: "unknown_field",
        len(records) + 2: "not_finite",
        len(records) + 3: "not_finite",
    }
    records += [
        b"{not json",
        json.dumps({**events[0], "tx_id": "p1", "merchant": "x"}).encode(),
        json.dumps({**events[0], "tx_id": "p2", "amount": float("nan")}).encode(),
        json.dumps({**events[0], "tx_id": "p3", "V4": float("inf")}).encode(),
    ]
    run_id = uuid.uuid4().hex[:8]
    source, out, dlq = f"tx-{run_id}", f"decisions-{run_id}", f"risk-dlq-{run_id}"
    bootstrap = kafka_broker.bootstrap
    create_topics(bootstrap, [source, out, dlq])
    produce(bootstrap, source, records)
    run_script(
        REPO / "jobs" / "risk_decisions.sql",
        load_config(env={}),
        RunOptions(
            variables={
                "KAFKA_BOOTSTRAP": bootstrap,
                "TRANSACTIONS_TOPIC": source,
                "DECISIONS_TOPIC": out,
                "DLQ_TOPIC": dlq,
                "SCAN_BOUNDED_MODE": "latest-offset",
                "GROUP_ID": f"risk-{run_id}",
                "RISK_MODELS": str(risk_models),
                "RISK_ACCOUNTS": str(accounts),
            },
            timeout_s=240,
        ),
    )
    got = [json.loads(r.value or b"null") for r in consume_all(bootstrap, out, timeout_s=30)]
    dead = [json.loads(r.value or b"null") for r in consume_all(bootstrap, dlq, timeout_s=30)]

    assert {d["source_offset"]: d["reason"] for d in dead} == poison
    assert all(d["source_topic"] == source for d in dead)
    assert base64.b64decode(dead[0]["payload_base64"]) in records

    want = expected(events, risk_models, accounts)
    assert sorted(d["tx_id"] for d in got) == sorted(want)
    codes = ("reasons", "path")  # arrays of codes: compared exactly, the rest with approx
    for d in got:
        w = want[d["tx_id"]]
        assert {k: d[k] for k in codes} == {k: w[k] for k in codes}, d["tx_id"]
        rest = {k: v for k, v in d.items() if k not in codes}
        assert rest == pytest.approx({k: v for k, v in w.items() if k not in codes}), d["tx_id"]
    unknown = next(d for d in got if d["account_id"] == "no-such-account")
    assert (unknown["approved"], unknown["reasons"]) == (False, ["fraud_ok", "unknown_account"])
    reasons = {c for d in got for c in d["reasons"]}
    assert {"fraud_ok", "within_limit", "over_limit"} <= reasons, reasons
