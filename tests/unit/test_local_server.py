"""LocalServer: pid and port files, stop and kill by PID, found again from another object.

A real child process (a sleeping Python) stands for the server.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flinkai.local.process import pid_alive, spawn
from flinkai.local.server import LocalServer


class SleepError(Exception):
    pass


class Sleeper(LocalServer):
    what = "sleep server"
    state_stem = "sleep"
    command = "sleep"
    error = SleepError
    stop_timeout_s = 5.0

    def start(self) -> str:
        self._check_not_running()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-c", "import time; time.sleep(60)", str(self.data_dir)]
        self._proc = spawn(argv, self.data_dir / "sleep.log")
        self._record(self._proc.pid)
        return self._address(self.port)

    def _owns(self, cmdline: list[bytes]) -> bool:
        return os.fsencode(str(self.data_dir)) in cmdline


def test_another_object_finds_stops_and_clears_the_server(tmp_path: Path) -> None:
    with Sleeper(tmp_path, "127.0.0.1", 1234) as started:
        pid = started.running_pid()
        assert pid is not None and pid_alive(pid)
        other = Sleeper(tmp_path, "127.0.0.1", 9)  # no child of its own: the pid file
        assert other.running_pid() == pid
        with pytest.raises(SleepError, match=rf"already running \(pid {pid} at 127.0.0.1:1234\)"):
            other.start()
        assert other.stop() is True
        assert not pid_alive(pid)
        assert not (tmp_path / "sleep.pid").exists() and not (tmp_path / "sleep.port").exists()
        assert other.stop() is False


def test_kill_is_a_crash_and_a_foreign_pid_is_never_trusted(tmp_path: Path) -> None:
    server = Sleeper(tmp_path, "127.0.0.1", 1234)
    with pytest.raises(SleepError, match="did not start a server"):
        server.wait()
    server.start()
    pid = server.kill()
    assert not pid_alive(pid) and server.wait() == -9
    with pytest.raises(SleepError, match=r"no sleep server for .* is running"):
        server.kill()
    # A pid file naming a live process whose command line is not ours (this test).
    (tmp_path / "sleep.pid").write_text(f"{os.getpid()}\n")
    fresh = Sleeper(tmp_path, "127.0.0.1", 1234)
    assert fresh.running_pid() is None
    assert fresh.stop() is False  # nothing signalled: this process still runs


class Launched(Sleeper):
    """Started through the shared _launch: readiness is a file the child writes."""

    def __init__(self, data_dir: Path, script: str, timeout_s: float = 10.0) -> None:
        super().__init__(data_dir, "127.0.0.1", 1234)
        self.script = script
        self.timeout_s = timeout_s
        self.seconds: float | None = None

    def start(self) -> str:
        self._check_not_running()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-c", self.script, str(self.data_dir)]
        ready = self.data_dir / "ready"
        self.seconds = self._launch(
            argv, self.data_dir / "sleep.log", ready.exists, self.timeout_s, poll_s=0.05
        )
        return self._address(self.port)

    def log_tail(self, lines: int = 30) -> str:
        return (self.data_dir / "sleep.log").read_text()


_READY_THEN_SLEEP = (
    "import pathlib, sys, time; time.sleep(0.3); "
    "pathlib.Path(sys.argv[1], 'ready').touch(); time.sleep(60)"
)


def test_launch_waits_for_ready_and_records_the_server(tmp_path: Path) -> None:
    server = Launched(tmp_path, _READY_THEN_SLEEP)
    with server:
        assert server.seconds is not None and server.seconds >= 0.3
        pid = server.running_pid()
        assert pid is not None and (tmp_path / "sleep.pid").read_text() == f"{pid}\n"
        assert (tmp_path / "sleep.port").read_text() == "1234\n"
    assert not pid_alive(pid)
    assert not (tmp_path / "sleep.pid").exists()


def test_launch_fails_fast_when_the_child_exits(tmp_path: Path) -> None:
    server = Launched(tmp_path, "import sys; print('bad flag', file=sys.stderr); sys.exit(3)")
    with pytest.raises(SleepError, match=r"exited with code 3(.|\n)*bad flag"):
        server.start()
    assert not (tmp_path / "sleep.pid").exists() and server.running_pid() is None


def test_launch_timeout_stops_the_child(tmp_path: Path) -> None:
    server = Launched(tmp_path, "import time; time.sleep(60)", timeout_s=0.5)
    with pytest.raises(SleepError, match=r"did not become ready on 127.0.0.1:1234 within 0.5s"):
        server.start()
    assert server._proc is not None and server._proc.poll() is not None
    assert not (tmp_path / "sleep.pid").exists()


def test_a_server_that_does_not_adopt_stops_only_its_own_child(tmp_path: Path) -> None:
    class OwnOnly(Launched):
        adopts = False

    first = Launched(tmp_path, _READY_THEN_SLEEP)
    first.start()
    try:
        pid = first.running_pid()
        other = OwnOnly(tmp_path, _READY_THEN_SLEEP)
        assert other.running_pid() == pid  # it sees the server through the pid file...
        assert other.stop() is False  # ...but stops only what it started
        assert pid is not None and pid_alive(pid) and (tmp_path / "sleep.pid").exists()
        assert other.stop_recorded() is True
        assert not pid_alive(pid) and not (tmp_path / "sleep.pid").exists()
    finally:
        first.stop()
