"""``flinkai bench agents --floor``: the job variants run the same script, one name changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flinkai.operators.agents import DECISION_FIELDS
from flinkai.paths import repo_root
from flinkai_bench.agents import _OPERATOR, FLOOR_LEGS, JOB_VARIANTS, _with_operator
from flinkai_bench.agents_floor import FLOOR_CODE, floor_row

_SCRIPT = (repo_root() or Path(".")) / "jobs" / "risk_decisions.sql"


def test_variant_script_differs_only_in_the_operator_and_settings() -> None:
    original = _SCRIPT.read_text(encoding="utf-8")
    copy = _with_operator(_SCRIPT, "flinkai_bench.agents_floor.fixed", {"a.b": "1"})
    text = copy.read_text(encoding="utf-8")
    assert text.startswith("SET 'a.b' = '1';\n")
    assert f"'{_OPERATOR}'" not in text
    assert text.removeprefix("SET 'a.b' = '1';\n") == original.replace(
        f"'{_OPERATOR}'", "'flinkai_bench.agents_floor.fixed'"
    )


def test_a_script_without_the_operator_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sql"
    other.write_text("SELECT 1;", encoding="utf-8")
    with pytest.raises(ValueError, match="expected one APPLY OPERATOR"):
        _with_operator(other, "x.y", {})


def test_floor_legs_end_with_the_real_operator() -> None:
    assert FLOOR_LEGS[-1] == "job"
    assert all(leg in JOB_VARIANTS for leg in FLOOR_LEGS[:-1])


def _event() -> bytes:
    return json.dumps({"tx_id": "t-1", "account_id": "7", "ts": 1000, "amount": 2.5,
                       **{f"V{i}": 0.1 for i in range(1, 29)}}).encode()  # fmt: skip


def test_floor_row_is_a_fixed_decision_with_the_transactions_ids() -> None:
    out, tx = floor_row(("7", _event(), 0, 42))
    assert tx is not None and len(out) == len(DECISION_FIELDS)
    row = dict(zip(DECISION_FIELDS, out, strict=True))
    assert (row["tx_id"], row["account_id"], row["ts_ms"], row["amount"]) == ("t-1", "7", 1000, 2.5)
    assert row["reasons"] == row["path"] == [FLOOR_CODE] and row["error_reason"] is None
    assert (row["source_partition"], row["source_offset"]) == (0, 42)


def test_floor_row_dead_letters_bad_bytes_like_the_operator() -> None:
    out, tx = floor_row(("", b"not json", 0, 1))
    row = dict(zip(DECISION_FIELDS, out, strict=True))
    assert tx is None and row["tx_id"] is None and row["error_reason"] == "not_json"


def test_the_langgraph_leg_is_the_real_operator_with_the_langgraph_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flinkai_bench import agents_floor

    seen: list[dict[str, str]] = []
    monkeypatch.setattr(agents_floor, "decide", lambda t_env, table, options: seen.append(options))
    options = {"key": "account_id", "payload": "payload"}
    agents_floor.decide_langgraph(None, None, options)
    assert seen == [{**options, "runtime": "langgraph"}]
    assert JOB_VARIANTS["job-langgraph"] == ("flinkai_bench.agents_floor.decide_langgraph", {})
    assert FLOOR_LEGS[-2:] == ("job-langgraph", "job")
