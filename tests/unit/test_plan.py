"""Python operators are read from the execution-plan part of Flink's explain text."""

from flinkai.runtime.plan import execution_plan, python_operators

PLAN = """== Abstract Syntax Tree ==
LogicalSink(table=[o])
+- LogicalProject(x=[f(a)])

== Optimized Physical Plan ==
Sink(table=[o])
+- PythonCalc(select=[f(a) AS x])

== Optimized Execution Plan ==
Sink(table=[o])
+- Calc(select=[f0.x AS x])
   +- PythonCalc(select=[a, g(f(a), 'x') AS f0])
      +- PythonCorrelate(invocation=[t($0)])
         +- TableSourceScan(table=[[t]], fields=[a])
"""


def test_only_the_execution_plan_is_read() -> None:
    section = execution_plan(PLAN)
    assert section.startswith("Sink(table=[o])")
    assert "LogicalProject" not in section and "Optimized Physical Plan" not in section


def test_python_operators_in_plan_order() -> None:
    assert python_operators(PLAN) == [
        "PythonCalc(select=[a, g(f(a), 'x') AS f0])",
        "PythonCorrelate(invocation=[t($0)])",
    ]


def test_a_plan_without_python_has_none_and_a_bare_text_is_read_whole() -> None:
    assert python_operators("== Optimized Execution Plan ==\nSink(table=[o])\n") == []
    assert python_operators("+- PythonCalc(select=[f(a)])") == ["PythonCalc(select=[f(a)])"]
