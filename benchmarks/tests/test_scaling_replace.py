"""The scaling harness replaces a TaskManager that exited on its own, as a ReplicaSet would."""

from __future__ import annotations

from pathlib import Path

from flinkai_bench.scaling.harness import (
    BEAM_CANCEL_RACE,
    ScalingRun,
    _replace_exited,
    exit_cause,
)


class _ExitedTm:
    def __init__(self, resource_id: str, code: int) -> None:
        self.resource_id = resource_id
        self.proc = type("P", (), {"poll": lambda _self: code})()
        self.out_file = Path("/nonexistent/flinkai-tm.out")


class _Cluster:
    """The three calls ``_replace_exited`` makes, over a fixed set of TaskManagers."""

    def __init__(self, exited: list[_ExitedTm], running: int) -> None:
        self.exited = exited
        self.running = running
        self.started = 0

    def exited_taskmanagers(self) -> list[_ExitedTm]:
        return self.exited

    def taskmanagers(self) -> list[object]:
        return [object()] * (self.running + self.started)

    def start_taskmanager(self, wait: bool = True) -> None:
        self.started += 1


def test_a_taskmanager_that_exited_on_its_own_is_replaced_and_recorded_once() -> None:
    run = ScalingRun(target=10.0, batch_size=32)
    run.stopped_tms.append("tm-stopped")  # stopped by the harness: not replaced
    cluster = _Cluster([_ExitedTm("tm-stopped", 143), _ExitedTm("tm-died", 1)], running=1)
    _replace_exited(cluster, 2, run, 12.0, lambda _line: None)
    assert cluster.started == 1
    assert len(run.replaced) == 1 and "tm-died exited (1)" in run.replaced[0]
    assert run.stopped_tms == ["tm-stopped", "tm-died"]
    # Seen once: the next tick neither records nor starts it again.
    _replace_exited(cluster, 2, run, 13.0, lambda _line: None)
    assert cluster.started == 1 and len(run.replaced) == 1


def test_an_exit_is_recorded_but_not_replaced_when_the_replicas_are_all_running() -> None:
    run = ScalingRun(target=10.0, batch_size=32)
    cluster = _Cluster([_ExitedTm("tm-old", 0)], running=2)
    _replace_exited(cluster, 2, run, 5.0, lambda _line: None)
    assert cluster.started == 0 and run.replaced == []
    assert run.stopped_tms == ["tm-old"]


_RACE_LOG = """\
2026-12-06 16:09:09,512 ERROR org.apache.flink.runtime.taskmanager.Task [] - FATAL - exception \
in exception handler of task Source: clicks_raw[1] -> PythonCalc[2] (1/1)#0.
java.lang.IllegalStateException: Reference count must not be negative.
\tat org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory.close(...)
2026-12-06 16:09:14,835 INFO  TaskManagerRunner [] - Terminating TaskManagerRunner with exit code 1.
"""


def test_the_beam_cancel_race_is_named_from_the_taskmanager_log(tmp_path: Path) -> None:
    out = tmp_path / "taskmanager-1.out"
    out.write_text(_RACE_LOG)
    assert exit_cause(out) == BEAM_CANCEL_RACE
    tm = _ExitedTm("tm-1", 1)
    tm.out_file = out
    run = ScalingRun(target=10.0, batch_size=32)
    _replace_exited(_Cluster([tm], running=0), 1, run, 24.0, lambda _line: None)
    assert f"[{BEAM_CANCEL_RACE}]" in run.replaced[0]


def test_any_other_exit_is_unknown(tmp_path: Path) -> None:
    out = tmp_path / "taskmanager-1.out"
    # The same exception outside a fatal cancellation, a different fatal error, no log.
    out.write_text("java.lang.IllegalStateException: Reference count must not be negative.\n")
    assert exit_cause(out) == "unknown"
    out.write_text(_RACE_LOG.replace("Reference count must not be negative", "OutOfMemoryError"))
    assert exit_cause(out) == "unknown"
    assert exit_cause(tmp_path / "missing.out") == "unknown"
