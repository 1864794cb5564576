"""The scaling harness replaces a TaskManager that exited on its own, as a ReplicaSet would."""

from __future__ import annotations

from pathlib import Path

from flinkai_bench.scaling.harness import ScalingRun, _replace_exited


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
