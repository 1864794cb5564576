"""The stage profile's parsers and classifier (flinkai_bench.shared.profile)."""

from flinkai_bench.shared.profile import (
    JVM_STAGES,
    PYTHON_STAGES,
    classify,
    parse_jfr_samples,
    parse_pyspy_raw,
)

PYSPY = "\n".join(
    [
        'process 12:"python -m x";run (pyflink/fn_execution/beam/beam_operations.py:90);'
        "eval (flinkai/udfs/vectorizer.py:71);__call__ (flinkai/functions/embedding.py:70);"
        "_embed (flinkai/backends/onnx.py:220);plan_sub_batches (flinkai/models/tokens.py:118) 7",
        "run (pyflink/fn_execution/beam/beam_operations.py:90);"
        "eval (flinkai/udfs/events.py:44);loads (json/__init__.py:346) 3",
        "run (pyflink/fn_execution/coders.py:50);from_pandas (pyarrow/pandas_compat.py:600) 5",
        "eval (flinkai/udfs/vectorizer.py:80);__init__ (pandas/core/frame.py:700) 2",
        "_bootstrap (threading.py:1002) 1",
        "garbage line",
    ]
)

JFR = """
jdk.ExecutionSample {
  startTime = 08:46:01.000
  sampledThread = "Source: clicks_raw[1] -> PythonCalc[2] (1/1)#0" (javaThreadId = 70)
  state = "STATE_RUNNABLE"
  stackTrace = [
    jdk.internal.math.FloatingDecimal$BinaryToASCIIBuffer.dtoa(int, long, int, boolean) line: 1
    org.apache.flink.formats.json.RowDataToJsonConverters.lambda$x(Object) line: 2
  ]
}

jdk.ExecutionSample {
  startTime = 08:46:01.020
  sampledThread = "kafka-producer-network-thread | producer-1" (javaThreadId = 71)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.util.HashMap.get(Object) line: 1
    java.lang.Thread.run() line: 2
  ]
}

jdk.ExecutionSample {
  startTime = 08:46:01.040
  sampledThread = "Source: clicks_raw[1] -> PythonCalc[2] (1/1)#0" (javaThreadId = 70)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.flink.table.runtime.typeutils.ArrayDataSerializer.copyColumnarArray(X) line: 1
    org.apache.flink.streaming.runtime.tasks.OperatorChain$CopyingChainingOutput.pushToOperator(X) line: 2
  ]
}
"""


def test_pyspy_raw_is_leaf_first_and_skips_bad_lines() -> None:
    samples = parse_pyspy_raw(PYSPY)
    assert len(samples) == 5
    frames, count = samples[0]
    assert count == 7
    assert frames[0].startswith("plan_sub_batches")
    assert not frames[-1].startswith("process ")


def test_python_stages_take_the_nearest_named_frame() -> None:
    stages = [classify(f, PYTHON_STAGES) for f, _ in parse_pyspy_raw(PYSPY)]
    # tokeniser under the ORT backend is tokenising, json under parse_click is parsing,
    # pyarrow under PyFlink's coders is the boundary, pandas under the UDF is encoding.
    assert stages == ["tokenise", "parse", "python boundary", "encode", "other"]


def test_jfr_samples_classify_by_frame_then_thread() -> None:
    samples = parse_jfr_samples(JFR)
    assert len(samples) == 3
    stages = [classify(f, JVM_STAGES) for f, _ in samples]
    assert stages == ["encode", "sink", "row copies"]


def test_waiting_threads_are_left_out_of_the_shares() -> None:
    from flinkai_bench.shared.profile import _shares

    raw = PYSPY + "\nwait (threading.py:600);Condition.wait (threading.py:331) 50"
    shares, total = _shares(parse_pyspy_raw(raw), PYTHON_STAGES)
    assert total == 18  # the 50 waiting samples are not CPU work
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    assert shares["tokenise"] == 7 / 18
