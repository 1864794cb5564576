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
