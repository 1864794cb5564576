"""A real Chroma server on loopback, for local runs and tests.

The ``chromadb`` wheel carries the server (Rust, started by its ``chroma run``
command). :class:`ChromaServer` runs it as a child in its own session, with one data
dir holding everything it owns::

    data/          Chroma's persistence path (collections, HNSW segments, WAL)
    chroma.log     its stdout/stderr (colour codes stripped when tailed into errors)
    chroma.pid     pid of the running server
    chroma.port    its HTTP port

The pid and port files let ``flinkai chroma start`` leave the server running and a
later ``status`` / ``stop`` find it from another process. A pid is trusted only when
its command line names this data dir, so a recycled pid is never signalled.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from flinkai.config import RagConfig
from flinkai.errors import SetupError
from flinkai.local.process import (
    LOOPBACK,
    free_port,
    kill_stragglers,
    port_in_use,
    signal_group,
    tail,
    tcp_open,
)
from flinkai.local.server import LocalServer
from flinkai.paths import cache_root

__all__ = ["ChromaServer", "ChromaStatus", "default_data_dir", "heartbeat"]

log = logging.getLogger(__name__)

_LOG_TAIL_LINES = 30
#: The v2 API's liveness endpoint; it answers once the server accepts requests.
HEARTBEAT_PATH = "/api/v2/heartbeat"


def default_data_dir() -> Path:
    """Where ``flinkai chroma start`` keeps its data unless told otherwise."""
    return cache_root() / "chroma"


def heartbeat(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether a Chroma server answers its heartbeat on ``host:port``."""
    url = f"http://{host}:{port}{HEARTBEAT_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = json.loads(resp.read().decode("utf-8"))
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return isinstance(body, dict) and "nanosecond heartbeat" in body


@dataclass(frozen=True)
class ChromaStatus:
    """What :meth:`ChromaServer.status` found.

    Attributes:
        running: A server process for this data dir is alive.
        data_dir: The data dir that was checked.
        pid: Its process id, when running.
        host: Host it listens on.
        port: Its HTTP port, when running.
        healthy: It answers the heartbeat.
    """

    running: bool
    data_dir: Path
    pid: int | None = None
    host: str = LOOPBACK
    port: int | None = None
    healthy: bool = False

    @property
    def url(self) -> str | None:
        """``http://host:port``, or ``None`` when not running."""
        return f"http://{self.host}:{self.port}" if self.running and self.port else None


class ChromaServer(LocalServer):
    """A Chroma server running as a child process, its data in ``data_dir``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The server
    outlives the Python process that started it unless stopped; any
    :class:`ChromaServer` for the same data dir can report on it, stop it or kill it.

    Args:
        data_dir: Folder for the data, log, pid and port files; created if needed.
            Defaults to :func:`default_data_dir`.
        port: HTTP port; ``None`` or 0 picks a free one.
        host: Address it binds to; loopback by default.
        start_timeout_s: How long :meth:`start` waits for the heartbeat.
        executable: The ``chroma`` command; default the one beside this interpreter,
            then PATH.
    """

    what = "Chroma server"
    state_stem = "chroma"
    command = "chroma"
    error = SetupError
    stop_timeout_s = 15.0

    def __init__(
        self,
        data_dir: str | Path | None = None,
        port: int | None = None,
        *,
        host: str = LOOPBACK,
        start_timeout_s: float = 60.0,
        executable: str | None = None,
    ) -> None:
        super().__init__(Path(data_dir or default_data_dir()), host, port or free_port(host))
        self.start_timeout_s = start_timeout_s
        self._executable = executable
        #: Seconds the last successful :meth:`start` took from launch to heartbeat.
        self.start_seconds: float | None = None

    @classmethod
    def from_config(
        cls,
        config: RagConfig,
        *,
        port: int | None = None,
        data_dir: str | Path | None = None,
    ) -> ChromaServer:
        """A server set up from the ``rag`` config section; arguments override it."""
        return cls(
            data_dir=data_dir or config.local_data_dir or None,
            port=port if port is not None else config.port,
            host=config.host,
            start_timeout_s=config.local_start_timeout_s,
        )

    @property
    def url(self) -> str:
        """``http://host:port`` this object starts the server on."""
        return f"http://{self.host}:{self.port}"

    @property
    def persist_dir(self) -> Path:
        """Chroma's ``--path``: collections and indexes."""
        return self.data_dir / "data"

    @property
    def log_file(self) -> Path:
        """The server's stdout and stderr."""
        return self.data_dir / "chroma.log"

    def config(self, base: RagConfig | None = None) -> RagConfig:
        """``base`` (default: defaults) pointed at this server."""
        from dataclasses import replace

        return replace(base or RagConfig(), host=self.host, port=self.port)

    def start(self) -> str:
        """Launch the server and wait until it answers its heartbeat.

        Returns:
            Its URL, ``http://host:port``.

        Raises:
            SetupError: ``chroma`` not installed, the port taken, a server for this
                data dir already running, or it exited or stayed silent for
                ``start_timeout_s`` (the message carries the end of its log).
        """
        self._check_not_running()
        exe = self._find_executable()
        if port_in_use(self.port, self.host):
            raise SetupError(
                f"cannot start Chroma: port {self.host}:{self.port} is already in use by "
                "another process; choose another port (--port) or stop what listens there"
            )
        self.persist_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            exe,
            "run",
            "--path",
            str(self.persist_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        env = dict(os.environ)
        # Product telemetry would try to leave the machine; nothing here may.
        env["ANONYMIZED_TELEMETRY"] = "False"
        log.info("starting Chroma on %s (data dir %s)", self.url, self.data_dir)
        self.start_seconds = self._launch(
            argv,
            self.log_file,
            lambda: heartbeat(self.host, self.port, timeout_s=1.0),
            self.start_timeout_s,
            env=env,
        )
        log.info("Chroma ready on %s after %.1fs", self.url, self.start_seconds)
        return self.url

    def status(self) -> ChromaStatus:
        """Whether a server for this data dir runs, its pid and port, and its heartbeat."""
        pid = self.running_pid()
        if pid is None:
            return ChromaStatus(running=False, data_dir=self.data_dir, host=self.host)
        port = self._recorded_port()
        healthy = port is not None and tcp_open(self.host, port) and heartbeat(self.host, port)
        return ChromaStatus(
            running=True,
            data_dir=self.data_dir,
            pid=pid,
            host=self.host,
            port=port,
            healthy=healthy,
        )

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server's log, colour codes removed."""
        logged = [line for line in tail(self.log_file, lines) if line.strip()]
        return "\n".join([f"--- last lines of {self.log_file} ---", *(logged or ["(empty)"])])

    # -- internals -------------------------------------------------------------

    def _find_executable(self) -> str:
        if self._executable:
            found = shutil.which(self._executable)
            if found is None:
                raise SetupError(f"Chroma executable {self._executable!r} not found")
            return found
        beside = Path(sys.executable).with_name("chroma")
        if beside.is_file():
            return str(beside)
        found = shutil.which("chroma")
        if found is None:
            raise SetupError(
                "the `chroma` command is not installed; install it with: pip install 'flinkai[rag]'"
            )
        return found

    def _address(self, port: int) -> str:
        return f"http://{self.host}:{port}"

    def _start_failed(self, code: int | None, timeout_s: float, detail: str) -> str:
        what = (
            f"exited with code {code}"
            if code is not None
            else f"did not answer its heartbeat within {timeout_s:g}s"
        )
        return f"the Chroma server {what} while starting on {self.url}\n{self.log_tail()}"

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        # The whole group: the server's own children go with it.
        signal_group(pid, sig)

    def _after_exit(self, pid: int) -> None:
        kill_stragglers(pid)

    def _owns(self, cmdline: list[bytes]) -> bool:
        return b"run" in cmdline and os.fsencode(str(self.persist_dir)) in cmdline
