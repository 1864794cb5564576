"""The one lifecycle every local server shares: launch, readiness, pid files, stop, kill.

A server started with ``flinkai <service> start`` outlives the process that started
it, so another process must find it again: its pid and port are kept in files in its
data dir, and a pid is trusted only while its command line names that data dir (see
:meth:`LocalServer._owns`), so a recycled pid is never signalled. The Kafka broker
(:mod:`flinkai.kafka.broker`), the Chroma server (:mod:`flinkai.rag.server`),
Prometheus (:mod:`flinkai.local.prometheus`) and Triton
(:mod:`flinkai.serve.triton_server`) build on :class:`LocalServer`; each adds its
command line, its readiness check and what its status holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from flinkai.local.process import pid_alive, read_int_file, spawn, wait_until

__all__ = ["LocalServer"]


class LocalServer:
    """A server child process whose pid and port files live in ``data_dir``.

    Subclasses set the class attributes, start the process with :meth:`_launch`
    (which records it and waits until it is ready) and say which command lines are
    theirs.

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
    #: Whether :meth:`stop` also stops a server another object or process started
    #: (found through the pid file). When False, :meth:`stop` touches only the child
    #: this object started; :meth:`stop_recorded` still finds the other one.
    adopts: ClassVar[bool] = True
    #: How long :meth:`stop` waits after SIGTERM before SIGKILL, unless told
    #: (a class default; an instance may set its own).
    stop_timeout_s: float = 30.0

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

    def _after_exit(self, pid: int) -> None:
        """Clean up after the server ``pid`` is gone (by default nothing).

        Servers spawned in their own process group sweep what is left of it here.
        """

    def _start_failed(self, code: int | None, timeout_s: float, detail: str) -> str:
        """The message of a start that failed: the server exited (``code``) or timed out."""
        where = self._address(self.port)
        if code is not None:
            return f"the {self.what} exited with code {code} while starting on {where}\n" + (
                self.log_tail()
            )
        return (
            f"the {self.what} did not become ready on {where} within {timeout_s:g}s"
            f"{detail}\n{self.log_tail()}"
        )

    def _stop_hint(self) -> str:
        """How to stop a running server, for the "already running" message."""
        return f"stop it first with `flinkai {self.command} stop`"

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

    def _recorded_pid(self) -> int | None:
        """The pid the pid file names (not yet checked to be alive or ours)."""
        return read_int_file(self._pid_file)

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

    def start(self) -> object:
        """Launch the server; subclasses implement it (with :meth:`_launch`)."""
        raise NotImplementedError

    def is_running(self) -> bool:
        """Whether the child this object started is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _launch(
        self,
        argv: Sequence[str],
        out_file: Path,
        ready: Callable[[], bool],
        timeout_s: float,
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        append: bool = True,
        poll_s: float = 0.2,
        not_ready: Callable[[], str] | None = None,
        fail_grace_s: float = 5.0,
    ) -> float:
        """Spawn the server, record its pid and port, wait until ``ready()`` holds.

        The child gets its own session (see :func:`~flinkai.local.process.spawn`). A
        child that exits while starting fails the start at once, not at the timeout.

        Args:
            argv: The command line.
            out_file: Where its stdout and stderr go.
            ready: True once the server serves requests.
            timeout_s: How long to wait for ``ready``.
            cwd: Its working folder (default the data dir).
            env: Its environment (default ours).
            append: Append to ``out_file`` (else truncate it).
            poll_s: Pause between two ``ready`` checks.
            not_ready: Why it is not ready yet, appended to the timeout message.
            fail_grace_s: SIGTERM grace of a failed start before SIGKILL (0: SIGKILL).

        Returns:
            Seconds from the spawn to ready.

        Raises:
            error: It exited or was not ready in time (see :meth:`_start_failed`); it
                is stopped and its pid and port files removed.
        """
        began = time.monotonic()
        self._proc = spawn(argv, out_file, cwd=cwd or self.data_dir, env=env, append=append)
        proc = self._proc
        try:
            self._record(proc.pid)
            if not wait_until(ready, timeout_s, alive=lambda: proc.poll() is None, poll_s=poll_s):
                detail = f" ({not_ready()})" if not_ready is not None else ""
                raise self.error(self._start_failed(proc.poll(), timeout_s, detail))
        except BaseException:
            self._terminate(proc.pid, grace_s=fail_grace_s)
            self._remove_state_files()
            raise
        return time.monotonic() - began

    def _check_not_running(self) -> None:
        """Before a start: refuse if a server for this data dir runs; clear stale files."""
        running = self.running_pid()
        if running is not None:
            port = self._recorded_port()
            where = f" at {self._address(port)}" if port else ""
            raise self.error(
                f"a {self.what} for {self.data_dir} is already running (pid {running}{where}); "
                f"{self._stop_hint()}"
            )
        self._remove_state_files()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout_s``
        (default :attr:`stop_timeout_s`).

        With :attr:`adopts` (the default) it works on a server started by another
        process too, through the pid file; without, only on this object's child.

        Returns:
            True if a server was running and is now gone, False if none was running.
        """
        return self._stop(self._own_pid() if not self.adopts else self.running_pid(), timeout_s)

    def stop_recorded(self, timeout_s: float | None = None) -> bool:
        """Stop the data dir's server, whoever started it (found through the pid file)."""
        return self._stop(self.running_pid(), timeout_s)

    def _own_pid(self) -> int | None:
        return self._proc.pid if self.is_running() and self._proc is not None else None

    def _stop(self, pid: int | None, timeout_s: float | None) -> bool:
        if pid is None:
            if self._proc is not None:
                # Our child exited by itself: sweep what it may have left behind.
                self._after_exit(self._proc.pid)
            if self.running_pid() is None:
                self._remove_state_files()  # stale, never another live server's
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
        self._terminate(pid, grace_s=0.0, kill_wait_s=timeout_s)
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

    def _terminate(self, pid: int, grace_s: float, kill_wait_s: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace_s`` (at once when 0), then :meth:`_after_exit`."""
        try:
            if self._proc is not None and self._proc.pid == pid and self._proc.poll() is not None:
                return  # our child already exited (and was reaped): nothing to signal
            if grace_s > 0:
                self._signal(pid, signal.SIGTERM)
                if self._wait_gone(pid, grace_s):
                    return
                self._log.warning(
                    "%s (pid %d) ignored SIGTERM for %.0fs; killing it", self.what, pid, grace_s
                )
            self._signal(pid, signal.SIGKILL)
            if not self._wait_gone(pid, kill_wait_s):
                raise self.error(f"the {self.what} (pid {pid}) survived SIGKILL")
        finally:
            self._after_exit(pid)

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
        pid = self._recorded_pid()
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
