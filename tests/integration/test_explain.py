"""``explain`` plans the shipped jobs on the real Flink planner and submits nothing.

The jobs pass a whole row and a field name to the model function so that Flink runs
the parse and the model call in one Python operator (one bundle wait, not two). A
SQL edit that splits them again would double the latency; these tests catch it.
"""

from pathlib import Path

import pytest

from flinkai.config import load_config
from flinkai.paths import bundled_udf_dir
from flinkai.runtime.plan import python_operators
from flinkai.runtime.runner import RunOptions, run_script

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# Port 1 on loopback refuses connections: planning must not need a broker.
VARS = {
    "KAFKA_BOOTSTRAP": "127.0.0.1:1",
    "FEATURES_TOPIC": "f",
    "SCORES_TOPIC": "s",
}


def explain(job: str) -> str:
    result = run_script(
        REPO / "jobs" / job,
        load_config(env={}),
        RunOptions(variables=VARS, udf_dirs=(bundled_udf_dir(),), explain=True),
    )
    assert result.status == "EXPLAINED"
    assert result.job_id is None
    assert result.plan
    return result.plan


@pytest.mark.parametrize(
    ("job", "parse", "model"),
    [
        ("embed_clicks.sql", "parse_click(payload)", "text_to_vector("),
        ("score_events.sql", "parse_feature_event(payload)", "predict("),
    ],
)
def test_parse_and_model_run_in_one_python_operator(job: str, parse: str, model: str) -> None:
    operators = python_operators(explain(job))
    assert len(operators) == 1, operators
    assert operators[0].startswith("PythonCalc(")
    assert parse in operators[0] and model in operators[0]


def test_the_field_form_splits_into_two_operators(tmp_path: Path) -> None:
    # The control: the projection form of the same job plans two Python operators,
    # so the test above can tell the two apart.
    sql = (REPO / "jobs" / "embed_clicks.sql").read_text()
    assert "text_to_vector(c, 'click_text')" in sql
    script = tmp_path / "embed_clicks_split.sql"
    script.write_text(
        sql.replace("text_to_vector(c, 'click_text')", "text_to_vector(c.click_text)")
    )
    result = run_script(
        script,
        load_config(env={}),
        RunOptions(variables=VARS, udf_dirs=(bundled_udf_dir(),), explain=True),
    )
    operators = python_operators(result.plan or "")
    assert len(operators) == 2, operators


RAG_VARS = {
    **VARS,
    "QUESTIONS_TOPIC": "q",
    "ANSWERS_TOPIC": "a",
    "DLQ_TOPIC": "d",
    "SCAN_BOUNDED_MODE": "unbounded",
}


def _retrieve_calls(script: Path) -> int:
    """``retrieve(`` calls in the Python operators of ``script``'s plan."""
    result = run_script(
        script,
        load_config(env={}),
        RunOptions(variables=RAG_VARS, udf_dirs=(bundled_udf_dir(),), explain=True),
    )
    return sum(op.count("retrieve(") for op in python_operators(result.plan or ""))


def test_rag_answer_retrieves_once_per_question(tmp_path: Path) -> None:
    # One embedding and one index search per question: the passages are read from
    # rag_prompt's result, so the planner has no second retrieve(...) to run. The plan
    # is cut at the `share` operator (a DataStream), so the view before it is explained,
    # read field by field as the rest of the job reads it.
    sql = (REPO / "jobs" / "rag_answer.sql").read_text()
    head = sql[: sql.index("CREATE TEMPORARY VIEW planned AS")]
    reads = "SELECT p.request, p.answer, p.passages, p.sources, p.error FROM planned_view;\n"
    once = tmp_path / "rag_answer_once.sql"
    once.write_text(head + reads)
    assert _retrieve_calls(once) == 1
    # The control: reading the passages from retrieve(...) itself plans a second call.
    twice = tmp_path / "rag_answer_twice.sql"
    twice.write_text(head + reads.replace("p.passages", "retrieve(q.question, 5)"))
    assert _retrieve_calls(twice) == 2
