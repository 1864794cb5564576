"""The lifecycle a local server shares: pid and port files, stop, kill, wait.

A server started with ``flinkai <service> start`` outlives the process that started
it, so another process must find it again: its pid and port are kept in files in its
data dir, and a pid is trusted only while its command line names that data dir (see
:meth:`LocalServer._owns`), so a recycled pid is never signalled. The Kafka broker
(:mod:`flinkai.kafka.broker`) and the Chroma server (:mod:`flinkai.rag.server`)
build on :class:`LocalServer`; each adds how it starts and what its status holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from flinkai.local.process import pid_alive, read_int_file

__all__ = ["LocalServer"]


class LocalServer:
    """A server child process whose pid and port files live in ``data_dir``.

    Subclasses set the class attributes, start the process (keeping it in
    ``_proc`` and calling :meth:`_record`) and say which command lines are theirs.

    Args:
        data_dir: Folder for the server's files; made absolute, because
            :meth:`_owns` matches it against the server's command line.
        host: Address the server listens on.
        port: Its port.
    """

    #: What it is, in messages ("Kafka broker"); the last word is its noun.
    what: ClassVar[str] = "server"
    #: Stem of the pid and port files (``<stem>.pid``, ``<stem>.port``).
    state_stem: ClassVar[str] = "server"
    #: The ``flinkai`` subcommand that manages it, for hints in messages.
    command: ClassVar[str] = "server"
    #: The error raised for a server that is running when it must not, or will not die.
    error: ClassVar[type[Exception]] = RuntimeError
    #: How long :meth:`stop` waits after SIGTERM before SIGKILL, unless told.
    stop_timeout_s: ClassVar[float] = 30.0

    def __init__(self, data_dir: Path, host: str, port: int) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.host = host
        self.port = port
        self._proc: subprocess.Popen[bytes] | None = None
        # The subclass's module logger: its records keep the name they always had.
        self._log = logging.getLogger(type(self).__module__)

    # -- what subclasses provide -------------------------------------------------

    def _owns(self, cmdline: list[bytes]) -> bool:
        """Whether a process with this command line is this data dir's server."""
        raise NotImplementedError

    def _address(self, port: int) -> str:
        """How messages name the server's address."""
        return f"{self.host}:{port}"

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log, for error messages."""
        raise NotImplementedError

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        """Send ``sig`` to the server (by default to its pid alone)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    # -- files in the data dir ---------------------------------------------------

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / f"{self.state_stem}.pid"

    @property
    def _port_file(self) -> Path:
        return self.data_dir / f"{self.state_stem}.port"

    def _record(self, pid: int) -> None:
        """Write the pid and port files of a server just launched."""
        self._pid_file.write_text(f"{pid}\n")
        self._port_file.write_text(f"{self.port}\n")

    def _remove_state_files(self) -> None:
        for path in (self._pid_file, self._port_file):
            path.unlink(missing_ok=True)

    def _recorded_port(self) -> int | None:
        """The port the running server was started on, from its port file."""
        return read_int_file(self._port_file)

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> str:
        """Launch the server; subclasses implement it."""
        raise NotImplementedError

    def _check_not_running(self) -> None:
        """Before a start: refuse if a server for this data dir runs; clear stale files."""
        running = self.running_pid()
        if running is not None:
            port = self._recorded_port()
            where = f" at {self._address(port)}" if port else ""
            raise self.error(
                f"a {self.what} for {self.data_dir} is already running (pid {running}{where}); "
                f"stop it first with `flinkai {self.command} stop`"
            )
        self._remove_state_files()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the server of this data dir: SIGTERM, then SIGKILL after ``timeout_s``
        (default :attr:`stop_timeout_s`).

        Works on a server started by another process, through the pid file.

        Returns:
            True if a server was running and is now gone, False if none was running.
        """
        pid = self.running_pid()
        if pid is None:
            self._remove_state_files()
            return False
        self._log.info("stopping %s (pid %d)", self.what, pid)
        self._terminate(pid, grace_s=self.stop_timeout_s if timeout_s is None else timeout_s)
        self._remove_state_files()
        return True

    def kill(self, timeout_s: float = 10.0) -> int:
        """SIGKILL the server of this data dir, as a crash would, and wait until it is gone.

        Returns:
            The pid that was killed.

        Raises:
            error: No server for this data dir is running, or it survived SIGKILL.
        """
        pid = self.running_pid()
        if pid is None:
            raise self.error(f"no {self.what} for {self.data_dir} is running")
        self._log.info("killing %s (pid %d) with SIGKILL", self.what, pid)
        self._signal(pid, signal.SIGKILL)
        if not self._wait_gone(pid, timeout_s):
            raise self.error(f"the {self.what} (pid {pid}) survived SIGKILL")
        self._remove_state_files()
        return pid

    def wait(self) -> int:
        """Block until the server this object started exits; its exit code.

        Raises:
            error: This object did not start a server.
        """
        if self._proc is None:
            noun = self.what.split()[-1]
            raise self.error(
                f"this {type(self).__name__} did not start a {noun}, so it cannot wait on one"
            )
        return self._proc.wait()

    # -- internals -----------------------------------------------------------------

    def _terminate(self, pid: int, grace_s: float) -> None:
        self._signal(pid, signal.SIGTERM)
        if self._wait_gone(pid, grace_s):
            return
        self._log.warning(
            "%s (pid %d) ignored SIGTERM for %.0fs; killing it", self.what, pid, grace_s
        )
        self._signal(pid, signal.SIGKILL)
        if not self._wait_gone(pid, 10.0):
            raise self.error(f"the {self.what} (pid {pid}) survived SIGKILL")

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def running_pid(self) -> int | None:
        """The pid of a live server for this data dir, or None."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        pid = read_int_file(self._pid_file)
        if pid is None or not pid_alive(pid):
            return None
        if not Path("/proc/self").is_dir():
            # No /proc (not Linux): the pid file and a live pid are all we can check.
            return pid
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        return pid if self._owns(args) else None
