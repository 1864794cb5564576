"""Each way a script can be wrong gives one located, readable error (real Flink runtime)."""

from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.paths import bundled_udf_dir
from flinkai.runtime.errors import ScriptError
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATAGEN = (
    "CREATE TEMPORARY TABLE t (x STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3');\n"
)
SINK = "CREATE TEMPORARY TABLE o (x STRING) WITH ('connector' = 'blackhole');\n"


def run(tmp_path: Path, sql: str) -> None:
    script = tmp_path / "job.sql"
    script.write_text(sql)
    run_script(
        script, load_config(env={}), RunOptions(udf_dirs=(bundled_udf_dir(),), timeout_s=120)
    )


def expect(tmp_path: Path, sql: str, *fragments: str) -> str:
    with pytest.raises(ScriptError) as err:
        run(tmp_path, sql)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message
    assert "\tat " not in message  # no Java stack frames
    return message


def test_unknown_function_names_file_line_and_function(tmp_path: Path) -> None:
    expect(
        tmp_path,
        DATAGEN + SINK + "\nINSERT INTO o SELECT nosuch_fn(x) FROM t;\n",
        "job.sql:4:",
        "No match found for function signature nosuch_fn",
        "in statement: INSERT INTO o SELECT nosuch_fn(x) FROM t",
    )


def test_bad_sql_names_the_statement(tmp_path: Path) -> None:
    expect(
        tmp_path,
        DATAGEN + "SELEC x FROM t;\n",
        "job.sql:2:",
        "SqlParserException",
        "SELEC x FROM t",
    )


def test_unknown_table(tmp_path: Path) -> None:
    expect(
        tmp_path, SINK + "INSERT INTO o SELECT x FROM missing_table;", "job.sql:2:", "missing_table"
    )


def test_missing_udf_module_fails_before_flink_starts(tmp_path: Path) -> None:
    expect(
        tmp_path,
        "CREATE TEMPORARY FUNCTION f AS 'no_such_module.f' LANGUAGE PYTHON;",
        "job.sql:1:",
        "cannot import module 'no_such_module'",
    )
    expect(
        tmp_path,
        "CREATE TEMPORARY FUNCTION f AS 'vectorizer.no_such_attr' LANGUAGE PYTHON;",
        "has no 'no_such_attr'",
    )


def test_unreachable_kafka_is_reported_with_its_address(tmp_path: Path) -> None:
    expect(
        tmp_path,
        "CREATE TEMPORARY TABLE k (x STRING) WITH ('connector' = 'kafka', 'topic' = 'a',\n"
        " 'properties.bootstrap.servers' = '127.0.0.1:1', 'format' = 'raw');",
        "job.sql:1:",
        "Kafka is unreachable at 127.0.0.1:1",
    )


def test_missing_connector_jar_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINKAI_HOME", str(tmp_path / "empty-home"))
    expect(
        tmp_path,
        "CREATE TEMPORARY TABLE k (x STRING) WITH ('connector' = 'kafka', 'topic' = 'a',\n"
        " 'properties.bootstrap.servers' = '127.0.0.1:1', 'format' = 'raw');",
        "connector jar is missing",
        "flinkai setup",
    )


def test_unresolved_placeholder(tmp_path: Path) -> None:
    expect(
        tmp_path,
        "CREATE TEMPORARY TABLE x (a INT) WITH ('topic' = '${NOT_SET_ANYWHERE}');",
        "${NOT_SET_ANYWHERE} (line 1)",
    )


def test_udf_folders_with_one_name_fail_before_flink_starts(tmp_path: Path) -> None:
    # Flink would fail the submit with FileAlreadyExistsException on <name>.zip.
    other = tmp_path / "more" / "udfs"
    other.mkdir(parents=True)
    script = tmp_path / "job.sql"
    script.write_text(DATAGEN + SINK + "INSERT INTO o SELECT x FROM t;\n")
    dirs = (bundled_udf_dir(), other)
    with pytest.raises(ScriptError, match="have the same name 'udfs'") as err:
        run_script(script, load_config(env={}), RunOptions(udf_dirs=dirs, timeout_s=120))
    assert str(other) in str(err.value)
    # the same folder twice is harmless
    run_script(
        script, load_config(env={}), RunOptions(udf_dirs=(bundled_udf_dir(), bundled_udf_dir()))
    )
