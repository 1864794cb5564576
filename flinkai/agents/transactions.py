"""Validating raw transaction events (no Flink).

A transaction is a JSON object with exactly these fields:

* ``tx_id``: non-empty string (at most 128 characters);
* ``account_id``: non-empty string (at most 64 characters);
* ``ts``: event time, epoch milliseconds (an integer);
* ``amount``: a finite number, not negative;
* ``V1``..``V28``: finite numbers (the card transaction's anonymised components).

Anything else is an :class:`InvalidTransaction` with a dead-letter reason code. The
codes shared with the other event parsers (:class:`flinkai.functions.events.Reason`):
``empty_payload``, ``invalid_utf8``, ``not_json``, ``too_deeply_nested``,
``not_object``, ``missing_field``, ``invalid_field``. Added here:

* ``unknown_field``: a field outside the list above (a producer on another schema);
* ``not_finite``: ``amount`` or a ``V`` field is NaN or infinite (JSON ``NaN``,
  ``Infinity`` and overflowing literals such as ``1e999`` parse as such).

An account that is not in the account table is *not* a dead letter: the graph
decides it (reason ``unknown_account``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flinkai.agents.data import V_FIELDS
from flinkai.functions.events import Invalid, decode_object

__all__ = ["FIELDS", "InvalidTransaction", "Transaction", "parse_transaction"]

FIELDS = ("tx_id", "account_id", "ts", "amount", *V_FIELDS)
_MAX_ID_CHARS = {"tx_id": 128, "account_id": 64}
_NUMBERS = ("amount", *V_FIELDS)


@dataclass(frozen=True)
class Transaction:
    """One valid transaction event.

    Attributes:
        features: ``V1``..``V28`` in order.
    """

    tx_id: str
    account_id: str
    ts_ms: int
    amount: float
    features: tuple[float, ...]


@dataclass(frozen=True)
class InvalidTransaction:
    """Why an event was rejected (``reason`` is a dead-letter reason code)."""

    reason: str
    detail: str


def parse_transaction(payload: bytes | None) -> Transaction | InvalidTransaction:
    """Validate one raw transaction event."""
    obj = decode_object(payload)
    if isinstance(obj, Invalid):
        return InvalidTransaction(obj.reason.value, obj.detail)
    unknown = sorted(k for k in obj if k not in FIELDS)
    if unknown:
        shown = ", ".join(repr(k[:64]) for k in unknown[:5])
        return InvalidTransaction("unknown_field", f"unknown field(s): {shown}")
    missing = [f for f in FIELDS if obj.get(f) is None]
    if missing:
        return InvalidTransaction("missing_field", f"missing or null: {', '.join(missing[:5])}")
    for name, cap in _MAX_ID_CHARS.items():
        value = obj[name]
        if not isinstance(value, str) or not value.strip() or len(value) > cap:
            return InvalidTransaction(
                "invalid_field", f"{name} must be a non-empty string of at most {cap} characters"
            )
    ts = obj["ts"]
    if isinstance(ts, bool) or not isinstance(ts, int) or not -(2**62) < ts < 2**62:
        return InvalidTransaction("invalid_field", f"ts {str(ts)[:64]!r} is not epoch ms")
    numbers: dict[str, float] = {}
    for name in _NUMBERS:
        value = obj[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return InvalidTransaction(
                "invalid_field", f"{name} must be a number, got {type(value).__name__}"
            )
        try:
            number = float(value)
        except OverflowError:  # an integer literal too large for a double
            number = math.inf
        if not math.isfinite(number):
            return InvalidTransaction("not_finite", f"{name} {number!r} is not a finite number")
        numbers[name] = number
    if numbers["amount"] < 0:
        return InvalidTransaction("invalid_field", f"amount {numbers['amount']!r} is negative")
    return Transaction(
        str(obj["tx_id"]),
        str(obj["account_id"]),
        int(ts),
        numbers["amount"],
        tuple(numbers[v] for v in V_FIELDS),
    )
