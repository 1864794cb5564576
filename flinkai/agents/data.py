"""The risk data sets and the transaction stream built from them (no Flink, no training libs).

Two real files (``<datasets>/risk``):

* ``creditcard_fraud.csv``: card transactions (``Time``, ``V1``..``V28``, ``Amount``,
  ``Class``);
* ``credit_default.csv``: credit-card clients (``ID``, ``LIMIT_BAL``, profile,
  repayment history, ``target``).

The stream: transaction row ``i`` (file order, header excluded) is given client row
``i % n_clients`` (file order) as its account; the account id is that client's
``ID``. Its event time is ``BASE_TIME_MS + Time * 1000`` and its amount ``Amount``,
taken in the account's currency units as is (no conversion). See docs/agents.md.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flinkai.agents.errors import RiskDataError
from flinkai.datasets import datasets_dir

__all__ = [
    "BASE_TIME_MS",
    "CREDIT_FEATURES",
    "FRAUD_FEATURES",
    "V_FIELDS",
    "Account",
    "Table",
    "account_row",
    "default_credit_file",
    "default_fraud_file",
    "labels",
    "load_accounts",
    "read_table",
    "transaction_events",
]

#: Event time of the first transaction (``Time`` = 0): 2026-12-01T00:00:00Z.
BASE_TIME_MS = 1_796_083_200_000
V_FIELDS = tuple(f"V{i}" for i in range(1, 29))
#: The fraud model's inputs, in order (``Time`` is left out: it is only the offset
#: from the first transaction of the capture).
FRAUD_FEATURES = (*V_FIELDS, "Amount")
#: The credit model's inputs, in order: the client's profile and history.
CREDIT_FEATURES = (
    "LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE",
    "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6",
    "BILL_AMT1", "BILL_AMT2", "BILL_AMT3", "BILL_AMT4", "BILL_AMT5", "BILL_AMT6",
    "PAY_AMT1", "PAY_AMT2", "PAY_AMT3", "PAY_AMT4", "PAY_AMT5", "PAY_AMT6",
)  # fmt: skip

F32 = npt.NDArray[np.float32]


def default_fraud_file() -> Path:
    """``<datasets>/risk/creditcard_fraud.csv``."""
    return datasets_dir() / "risk" / "creditcard_fraud.csv"


def default_credit_file() -> Path:
    """``<datasets>/risk/credit_default.csv``."""
    return datasets_dir() / "risk" / "credit_default.csv"


@dataclass(frozen=True)
class Table:
    """A CSV file as named float columns (Excel-style numbers such as ``1.00E+05`` parse).

    Attributes:
        columns: Header names, in file order.
        values: ``[rows, columns]`` float64.
    """

    columns: tuple[str, ...]
    values: npt.NDArray[np.float64]

    def select(self, names: Sequence[str]) -> F32:
        """The named columns as ``float32`` ``[rows, len(names)]``."""
        idx = [self.columns.index(n) for n in names]
        return self.values[:, idx].astype(np.float32)

    def column(self, name: str) -> npt.NDArray[np.float64]:
        return self.values[:, self.columns.index(name)]


def read_table(path: Path, required: Sequence[str]) -> Table:
    """Read a numeric CSV file with a header.

    Raises:
        RiskDataError: The file is missing, lacks a required column, or a cell is not a
            finite number.
    """
    if not path.is_file():
        raise RiskDataError(f"{path} not found; set FLINKAI_DATASETS_DIR or pass the path")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = tuple(h.strip().strip('"') for h in next(reader, []))
        missing = [c for c in required if c not in header]
        if missing:
            raise RiskDataError(f"{path}: missing column(s) {missing}")
        rows: list[list[float]] = []
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                values = [float(x) for x in row]
            except ValueError as e:
                raise RiskDataError(f"{path}:{line_no}: {e}") from e
            if len(values) != len(header) or not all(math.isfinite(v) for v in values):
                raise RiskDataError(f"{path}:{line_no}: expected {len(header)} finite numbers")
            rows.append(values)
    if not rows:
        raise RiskDataError(f"{path}: no rows")
    return Table(header, np.asarray(rows, dtype=np.float64))


@dataclass(frozen=True)
class Account:
    """One account's reference data, as the graph sees it.

    Attributes:
        account_id: The client's ``ID``, as a string.
        credit_limit: ``LIMIT_BAL``.
        features: :data:`CREDIT_FEATURES` values, in order.
    """

    account_id: str
    credit_limit: float
    features: tuple[float, ...]


def _id(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def load_accounts(path: Path | None = None) -> dict[str, Account]:
    """Accounts by id from a file in ``credit_default.csv``'s layout.

    Raises:
        RiskDataError: The file is missing or malformed, or an ``ID`` repeats.
    """
    table = read_table(path or default_credit_file(), ("ID", *CREDIT_FEATURES))
    feats = table.select(CREDIT_FEATURES)
    out: dict[str, Account] = {}
    for raw_id, limit, row in zip(table.column("ID"), table.column("LIMIT_BAL"), feats,
                                  strict=True):  # fmt: skip
        key = _id(raw_id)
        if key in out:
            raise RiskDataError(f"{path}: ID {key} appears twice")
        out[key] = Account(key, float(limit), tuple(float(x) for x in row))
    return out


def account_row(tx_index: int, n_clients: int) -> int:
    """The client row (file order) that transaction row ``tx_index`` belongs to."""
    if n_clients < 1 or tx_index < 0:
        raise RiskDataError(f"bad mapping input: tx {tx_index}, {n_clients} clients")
    return tx_index % n_clients


def transaction_events(
    fraud: Table, clients: Table, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The transaction stream: one event per transaction row, in file order.

    Each event: ``tx_id`` (``tx-<row>``), ``account_id``, ``ts`` (epoch ms),
    ``amount`` and ``V1``..``V28`` (the transaction's fields); see the module docstring
    for the mapping.
    """
    ids = clients.column("ID")
    vs = fraud.select(V_FIELDS).astype(np.float64)
    times, amounts = fraud.column("Time"), fraud.column("Amount")
    n = len(times) if limit is None else min(limit, len(times))
    for i in range(n):
        event: dict[str, Any] = {
            "tx_id": f"tx-{i}",
            "account_id": _id(ids[account_row(i, len(ids))]),
            "ts": BASE_TIME_MS + round(float(times[i]) * 1000),
            "amount": float(amounts[i]),
        }
        event.update({name: float(v) for name, v in zip(V_FIELDS, vs[i], strict=True)})
        yield event


def labels(table: Table, column: str) -> npt.NDArray[np.int64]:
    """A 0/1 label column as integers."""
    return table.column(column).astype(np.int64)
