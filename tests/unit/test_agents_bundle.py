"""The vectorised bundle path decides exactly as the per-event operator, on the whole fraud file.

Real models (LightGBM trained on the shared risk data, run in ONNX Runtime). Every row
of ``creditcard_fraud.csv`` goes through :func:`process_transaction` one at a time
(today's keyed operator, free of Flink) and through :func:`process_bundle` in bundles
of several sizes; the output rows, the final state of every account and the number of
state reads and writes per bundle are compared. Accounts repeat (a Zipf-like draw over
a few hundred accounts with low limits), so the 24 h spend binds and each decision
depends on the account's earlier ones; a few rows are invalid or name an unknown
account.
"""

from __future__ import annotations

import base64
import csv
import json
from collections import Counter
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
from flinkai.errors import ConfigError
from flinkai.operators.agents import (
    DECISION_FIELDS,
    parse_options,
    process_bundle,
    process_transaction,
)

N_ACCOUNTS = 300


@pytest.fixture(scope="module")
def data(risk_data: tuple[Table, Table]) -> tuple[Table, Table]:
    return risk_data


@pytest.fixture(scope="module")
def graph(small_risk_models: Path) -> RiskGraph:
    return RiskGraph.from_models(RiskModels(small_risk_models))


@pytest.fixture(scope="module")
def accounts(tmp_path_factory: pytest.TempPathFactory, data: tuple[Table, Table]) -> Any:
    """The first client rows as accounts, limits low enough for the 24 h spend to bind."""
    _, clients = data
    path = tmp_path_factory.mktemp("accounts") / "accounts.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(clients.columns)
        for row in clients.values[:N_ACCOUNTS]:
            row = row.copy()
            row[clients.columns.index("LIMIT_BAL")] = 1500.0
            w.writerow([repr(float(v)) for v in row])
    return load_accounts(path)


def _rows(data: tuple[Table, Table]) -> list[tuple[Any, ...]]:
    """Every fraud row once, accounts drawn Zipf-like (exponent 1.0) over N_ACCOUNTS."""
    fraud, clients = data
    few = Table(clients.columns, clients.values[:N_ACCOUNTS])
    ids = [str(int(v)) for v in few.column("ID")]
    weights = 1.0 / np.arange(1, len(ids) + 1)
    draw = np.random.default_rng(7).choice(len(ids), size=len(fraud.values),
                                           p=weights / weights.sum())  # fmt: skip
    rows: list[tuple[Any, ...]] = []
    for i, e in enumerate(transaction_events(fraud, few)):
        e = {**e, "account_id": ids[draw[i]]}
        if i % 97 == 5:
            e["account_id"] = f"no-such-account-{i % 3}"
        payload = json.dumps(e).encode()
        if i % 211 == 9:
            payload = b'{"tx_id": "broken"'
        if i % 2:  # both payload forms: raw bytes and base64 text
            rows.append((e["account_id"], payload, 0, i))
        else:
            rows.append((e["account_id"], base64.b64encode(payload).decode(), 0, i))
    return rows


def test_bundles_decide_as_the_per_event_operator_on_the_whole_file(
    data: tuple[Table, Table], graph: RiskGraph, accounts: Any
) -> None:
    rows = _rows(data)
    assert len(rows) == len(data[0].values) > 4000

    want: list[tuple[Any, ...]] = []
    states: dict[str, Any] = {}
    for row in rows:
        out, snap = process_transaction(states.get(row[0]), row, graph, accounts)
        if snap is not None:
            states[row[0]] = snap
        want.append(out)
    field = {name: i for i, name in enumerate(DECISION_FIELDS)}
    codes = Counter(c for r in want if r[field["error_reason"]] is None
                    for c in r[field["reasons"]])  # fmt: skip
    # Every branch is taken, and often, or the comparison proves little.
    for code in ("fraud_high", "unknown_account", "credit_ok", "within_limit", "over_limit"):
        assert codes[code] >= 5, codes
    assert sum(1 for r in want if r[field["spend_24h"]]) > 1000
    assert sum(1 for r in want if r[field["error_reason"]]) >= 10

    for size in (1, 7, 64, 500, len(rows)):
        got, store = [], _Store()
        for start in range(0, len(rows), size):
            store.reads.clear()
            store.writes.clear()
            got.extend(process_bundle(rows[start : start + size], store.read, store.write,
                                      graph, accounts))  # fmt: skip
            # One pass per bundle: each account's state read once and written at most once.
            assert max(store.reads.values(), default=1) == 1
            assert max(store.writes.values(), default=1) == 1
        assert got == want, f"bundles of {size}"
        assert store.states == states, f"bundles of {size}"

    # The job's layout: rows keyed by a bucket of accounts (the first field), the state
    # by each row's parsed account. Batches as a timer finds them: a bucket's rows only.
    buckets = 3
    store = _Store()
    by_bucket: dict[int, list[tuple[int, tuple[Any, ...]]]] = {}
    got_at: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(rows), 40):
        by_bucket.clear()
        for i in range(start, min(start + 40, len(rows))):
            b = sum(map(ord, rows[i][0])) % buckets
            by_bucket.setdefault(b, []).append((i, (str(b), *rows[i][1:])))
        for members in by_bucket.values():
            out = process_bundle([r for _, r in members], store.read, store.write, graph,
                                 accounts, account_keys=True)  # fmt: skip
            got_at.update(zip((i for i, _ in members), out, strict=True))
    assert [got_at[i] for i in range(len(rows))] == want
    assert store.states == states


class _Store:
    """Keyed state as a dict, counting reads and writes."""

    def __init__(self) -> None:
        self.states: dict[str, Any] = {}
        self.reads: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()

    def read(self, key: str) -> Any:
        self.reads[key] += 1
        return self.states.get(key)

    def write(self, key: str, snap: Any) -> None:
        self.writes[key] += 1
        self.states[key] = snap


def test_a_bundle_of_dead_letters_reads_no_state(graph: RiskGraph, accounts: Any) -> None:
    rows = [("a", b"not json", 1, 2), ("b", "%%%", 1, 3)]

    def never(*_: Any) -> Any:
        raise AssertionError("state touched")

    out = process_bundle(rows, never, never, graph, accounts)
    assert [r[15] for r in out] == ["not_json", "invalid_field"]
    assert [r[17:19] for r in out] == [(1, 2), (1, 3)]


def test_bucket_options_parse_and_bad_values_are_refused() -> None:
    base = {"key": "account_id", "payload": "payload"}
    assert (parse_options(base).buckets, parse_options(base).flush_ms) == (None, 5)
    opts = parse_options(base | {"buckets": "4", "flush_ms": "2"})
    assert (opts.buckets, opts.flush_ms) == (4, 2)
    for bad in ("0", "-1", "two"):
        with pytest.raises(ConfigError, match=r"option 'buckets' is .*; expected a positive"):
            parse_options(base | {"buckets": bad})
    with pytest.raises(ConfigError, match=r"option 'flush_ms' is '0'"):
        parse_options(base | {"flush_ms": "0"})
