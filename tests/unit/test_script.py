import re
from pathlib import Path

import pytest

from flinkai.runtime.errors import ScriptError
from flinkai.runtime.script import Kind, parse_script, parse_set, substitute


def test_statements_keep_their_first_line_and_kind() -> None:
    script = parse_script(
        "-- header comment\n"
        "SET 'pipeline.name' = 'it''s';\n"
        "\n"
        "/* a\n block */ CREATE TABLE t (x STRING) WITH ('k' = 'a;b');\n"
        "INSERT INTO t SELECT ';' -- trailing comment\n"
        ";\n"
        "SELECT 1",
        "job.sql",
    )
    got = [(s.line, s.kind) for s in script.statements]
    assert got == [(2, Kind.SET), (5, Kind.DDL), (6, Kind.INSERT), (8, Kind.QUERY)]
    assert "'a;b'" in script.statements[1].text
    assert parse_set(script.statements[0]) == ("pipeline.name", "it's")
    assert script.where(script.statements[2]) == "job.sql:6"


def test_statement_set_blocks_are_flattened() -> None:
    for header in ("EXECUTE STATEMENT SET\nBEGIN\n", "BEGIN STATEMENT SET;\n"):
        script = parse_script(header + "INSERT INTO a SELECT 1;\nINSERT INTO b SELECT 2;\nEND;\n")
        assert [s.kind for s in script.statements] == [Kind.INSERT, Kind.INSERT]
        assert [s.line for s in script.statements] == [
            3 if header.count("\n") == 2 else 2,
            4 if header.count("\n") == 2 else 3,
        ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT 'open", "unterminated ' quote"),
        ("/* never closed", "unterminated /* comment"),
        ("EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 1;", "never closed"),
        ("BEGIN STATEMENT SET; CREATE TABLE x (a INT); END;", "only INSERT"),
        ("END;", "END without"),
        ("SET pipeline.name = x;", "expected SET 'key' = 'value'"),
    ],
)
def test_malformed_scripts_fail_with_a_located_message(text: str, message: str) -> None:
    with pytest.raises(ScriptError, match=re.escape(message)):
        parse_script(text, Path("bad.sql"))
    with pytest.raises(ScriptError, match=r"^bad\.sql:1: "):
        parse_script(text, Path("bad.sql"))


def test_placeholders_resolve_with_defaults_and_report_all_missing() -> None:
    assert substitute("${A} ${B:-dflt} ${C:-}", {"A": "1"}) == "1 dflt "
    with pytest.raises(ScriptError) as err:
        substitute("x\n${MISSING_ONE}\n${MISSING_TWO}", {}, "job.sql")
    assert "${MISSING_ONE} (line 2)" in str(err.value)
    assert "${MISSING_TWO} (line 3)" in str(err.value)
