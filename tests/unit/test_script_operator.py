"""Parsing of ``CREATE VIEW ... AS APPLY OPERATOR`` statements."""

import re
from pathlib import Path

import pytest

from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Kind, parse_operator, parse_script

DRIFT = (
    "CREATE TEMPORARY VIEW drift_events AS\n"
    "  APPLY OPERATOR 'flinkai.operators.drift.detect_drift' TO embedded\n"
    "  WITH ('key' = 'stream_id', 'time' = 'event_ms', 'embedding' = 'embedding')"
)


def test_operator_statement_is_its_own_kind_with_view_target_source_and_options() -> None:
    script = parse_script(f"SET 'a' = 'b';\n{DRIFT};\nINSERT INTO o SELECT * FROM drift_events;")
    assert [(s.line, s.kind) for s in script.statements] == [
        (1, Kind.SET),
        (2, Kind.OPERATOR),
        (5, Kind.INSERT),
    ]
    spec = parse_operator(script.statements[1])
    assert spec.view == "drift_events"
    assert spec.target == "flinkai.operators.drift.detect_drift"
    assert spec.source == "embedded"
    assert spec.options == {"key": "stream_id", "time": "event_ms", "embedding": "embedding"}
    assert list(spec.options) == ["key", "time", "embedding"]


@pytest.mark.parametrize(
    "text",
    [
        "CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t",
        "create temporary view v as apply operator 'm.f' to t with ()",
        "CREATE VIEW v AS APPLY OPERATOR 'pkg.mod.f' TO t WITH('k'='v')",
    ],
)
def test_without_temporary_options_or_case(text: str) -> None:
    stmt = parse_script(text).statements[0]
    assert stmt.kind is Kind.OPERATOR
    spec = parse_operator(stmt)
    assert (spec.view, spec.source) == ("v", "t")
    assert spec.options in ({}, {"k": "v"})


def test_option_values_keep_semicolons_commas_and_escaped_quotes() -> None:
    stmt = parse_script(
        "CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t WITH (\n  'a' = 'x;y, z',\n"
        "  'it''s' = '''q'''\n)"
    ).statements[0]
    assert parse_operator(stmt).options == {"a": "x;y, z", "it's": "'q'"}


def test_ordinary_views_stay_ddl() -> None:
    stmt = parse_script("CREATE TEMPORARY VIEW v AS SELECT apply_x FROM t").statements[0]
    assert stmt.kind is Kind.DDL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE VIEW v AS APPLY OPERATOR m.f TO t", "expected CREATE [TEMPORARY] VIEW"),
        ("CREATE VIEW v AS APPLY OPERATOR 'nodot' TO t", "'module.function'"),
        ("CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t WITH ('k' = 'v',)", "trailing comma"),
        ("CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t WITH ('k' = 'v' 'x')", "got: 'k' = 'v' 'x'"),
        ("CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t WITH (k = 'v')", "expected 'key' = 'value'"),
        ("CREATE VIEW v AS APPLY OPERATOR 'm.f' TO t WITH ('k' = '1', 'k' = '2')", "given twice"),
    ],
)
def test_malformed_operator_statements_fail_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ScriptError) as err:
        parse_script("SET 'a' = 'b';\n\n" + text + ";", Path("job.sql"))
    assert str(err.value).startswith("job.sql:3: ")
    assert re.search(re.escape(message), str(err.value))
