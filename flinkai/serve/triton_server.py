"""A real Triton Inference Server on this machine, without Docker.

``nvidia-pytriton`` bundles a ``tritonserver`` binary and its Python backend and runs
on CPU-only hosts, but it needs numpy<2 while flinkai's runtime uses numpy 2. So the
server lives in its own virtualenv (``cache_root()/venvs/triton``, built on first use
by :func:`ensure_server_venv`) and runs as a separate process:
:mod:`flinkai.serve.pytriton_app` executed by that venv's interpreter.

:class:`TritonServer` starts it in a new process group (so a stop or kill reaches
``tritonserver`` and its backend stubs too), waits until the gRPC endpoint reports
the model ready, and stops, kills or restarts it on the same ports. A pid file lets
``flinkai serve stop`` find a detached server later. The lifecycle is the one every
local server shares (:class:`~flinkai.local.server.LocalServer`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flinkai.config import ModelConfig
from flinkai.errors import ConfigError, SetupError, require
from flinkai.local.process import kill_stragglers, port_in_use, signal_group
from flinkai.local.server import LocalServer
from flinkai.paths import cache_root
from flinkai.staging import staged_file


def _free_on(host: str, port: int) -> bool:
    return not port_in_use(port, host)


__all__ = [
    "PYTRITON_VERSION",
    "SERVER_VENV_REQUIREMENTS",
    "ServerInfo",
    "TritonServer",
    "TritonServerOptions",
    "ensure_server_venv",
    "is_server_process",
    "read_pid_file",
    "server_venv_dir",
    "stop_detached",
    "workspace_dir",
]

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

PYTRITON_VERSION = "0.7.0"

#: Every package of the server venv, pinned: nvidia-pytriton 0.7.0 requires numpy<2;
#: onnxruntime 1.32 (the same as the runtime's) still supports numpy 1.26. The rest is
#: what pip resolved for these on Python 3.11. No ``tokenizers``: clients tokenise.
SERVER_VENV_REQUIREMENTS: tuple[str, ...] = (
    f"nvidia-pytriton=={PYTRITON_VERSION}",
    "onnxruntime==1.32.0",
    "numpy==1.26.4",
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "attrs==26.1.0",
    "brotli==1.2.1",
    "certifi==2026.10.19.post1",
    "flatbuffers==25.12.19",
    "frozenlist==1.8.0",
    "gevent==26.9.0",
    "geventhttpclient==2.6.1",
    "greenlet==3.3.2",
    "grpcio==1.85.3",
    "idna==3.20",
    "importlib_metadata==10.2.0",
    "lazy-importer==0.1.0",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "ml_dtypes==0.5.4",
    "multidict==7.2.1",
    "mypy_extensions==1.2.0",
    "packaging==26.4",
    "propcache==0.5.4",
    "protobuf==6.33.6",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "python-rapidjson==1.25",
    "pyzmq==27.3.0",
    "rich==15.0.0",
    "sh==2.4.0",
    "shellingham==1.5.4",
    "tritonclient==2.73.0",
    "typer==0.29.2",
    "typing-inspect==0.9.0",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
    "wrapt==2.5.2",
    "yarl==1.25.1",
    "zipp==4.1.2",
    "zope.event==6.2",
    "zope.interface==8.7",
)

_MARKER = "flinkai-venv.json"
#: Longest Unix socket path Linux accepts (``sockaddr_un.sun_path`` less its NUL).
_MAX_SOCKET_PATH = 107
_APP = Path(__file__).resolve().with_name("pytriton_app.py")
_LOG_TAIL_LINES = 40


def server_venv_dir() -> Path:
    """Where the Triton server venv lives: ``cache_root()/venvs/triton``."""
    return cache_root() / "venvs" / "triton"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _marker_matches(venv: Path) -> bool:
    try:
        marker = json.loads((venv / _MARKER).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return bool(
        marker.get("requirements") == list(SERVER_VENV_REQUIREMENTS) and _venv_python(venv).exists()
    )


def ensure_server_venv(
    venv: Path | None = None,
    *,
    python: str | None = None,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Build the server venv unless an up-to-date one exists; return its folder.

    A venv counts as up to date when its marker file lists exactly
    :data:`SERVER_VENV_REQUIREMENTS`; an incomplete or outdated one is rebuilt.
    Concurrent callers wait for each other (file lock), so it is built once.

    Args:
        venv: Target folder; default :func:`server_venv_dir`.
        python: Interpreter to build from; default the running one (its major.minor
            must have a Python backend stub in PyTriton: 3.8 to 3.13).
        rebuild: Delete and rebuild even if up to date.
        progress: Called with one line per step; default: the module logger.

    Returns:
        The venv folder.

    Raises:
        SetupError: ``venv`` or ``pip install`` failed; the message has pip's last lines.
    """
    say = progress or log.info
    venv = (venv or server_venv_dir()).expanduser()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(venv.with_name(venv.name + ".lock")):
        if not rebuild and _marker_matches(venv):
            return venv
        started = time.perf_counter()
        if venv.exists():
            say(f"removing outdated server venv {venv}")
            shutil.rmtree(venv)
        interpreter = python or sys.executable
        say(f"creating Triton server venv at {venv} (one-off; about a minute, ~450 MB)")
        _run_logged([interpreter, "-m", "venv", str(venv)], say, "python -m venv")
        say(
            f"installing {len(SERVER_VENV_REQUIREMENTS)} pinned packages "
            f"(nvidia-pytriton {PYTRITON_VERSION}, onnxruntime, numpy<2) ..."
        )
        _run_logged(
            [
                str(_venv_python(venv)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--only-binary=:all:",
                "--progress-bar",
                "off",
                *SERVER_VENV_REQUIREMENTS,
            ],
            say,
            "pip install",
            forward=("Collecting", "Downloading", "Installing", "Successfully"),
        )
        say("checking the server venv imports pytriton and onnxruntime ...")
        _run_logged(
            [str(_venv_python(venv)), "-c", "import pytriton.triton, onnxruntime, numpy"],
            say,
            "import check",
        )
        seconds = time.perf_counter() - started
        marker = {
            "requirements": list(SERVER_VENV_REQUIREMENTS),
            "python": interpreter,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_s": round(seconds, 1),
        }
        (venv / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        say(f"server venv ready in {seconds:.0f}s")
        return venv


def _run_logged(
    cmd: Sequence[str], say: Progress, what: str, *, forward: Sequence[str] = ()
) -> None:
    """Run ``cmd``; forward progress lines; raise SetupError with the output tail on failure."""
    lines: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            lines.append(line)
            if forward and line.startswith(tuple(forward)):
                say(f"  {line}")
        code = proc.wait()
    if code != 0:
        tail = "\n".join(lines[-_LOG_TAIL_LINES:])
        raise SetupError(
            f"{what} failed (exit {code}) while building the Triton server venv:\n{tail}"
        )


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def workspace_dir(run_dir: Path, model_name: str, grpc_port: int) -> Path:
    """PyTriton's workspace: ``run_dir/workspace``, or a short folder in the temp dir.

    PyTriton binds Unix sockets there (``<model>_0_0-server.sock``). When that path is
    longer than Linux allows, the server still reports the model ready but never
    answers an inference request, so a deep ``run_dir`` (a test's ``tmp_path``) gets
    ``<tmp>/flinkai-triton-<grpc port>`` instead.
    """
    workspace = run_dir / "workspace"
    # A few spare characters: instance and index numbers may grow past one digit.
    longest = workspace / f"{model_name}_00_00-server.sock"
    if len(os.fsencode(longest)) <= _MAX_SOCKET_PATH:
        return workspace
    return Path(tempfile.gettempdir()) / f"flinkai-triton-{grpc_port}"


@dataclass(frozen=True)
class TritonServerOptions:
    """What to serve, where, and how long to wait.

    Attributes:
        model: Which exported artifacts to serve (``ModelConfig.dir`` or the default folder).
        grpc_port: gRPC port (the one clients use).
        http_port: HTTP/REST port.
        metrics_port: Prometheus metrics port.
        address: Interface to listen on; loopback by default.
        max_batch_size: Largest batch Triton's dynamic batcher forms or accepts.
        max_queue_delay_us: How long a request may wait for others to join its batch.
        max_queue_size: Requests Triton's queue may hold; further ones are rejected at
            once (gRPC ``UNAVAILABLE``). 0 leaves the queue unbounded.
        threads: onnxruntime intra-op threads in the server (0: one per core).
        start_timeout_s: Bound on start-up, from spawn to model ready.
        stop_timeout_s: Grace period after SIGTERM before SIGKILL.
        run_dir: Logs, pid file and PyTriton workspace (see :func:`workspace_dir`); default
            ``cache_root()/serve/triton-<grpc_port>``.
        venv: Server venv; default :func:`server_venv_dir`.
        tls_cert_file: PEM server certificate; set, gRPC is served over TLS only.
        tls_key_file: PEM private key of ``tls_cert_file``.
        tls_client_ca_file: PEM CA that client certificates must chain to; set, the
            server requires one (mutual TLS).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    grpc_port: int = 8001
    http_port: int = 8000
    metrics_port: int = 8002
    address: str = "127.0.0.1"
    max_batch_size: int = 64
    max_queue_delay_us: int = 2000
    max_queue_size: int = 0
    threads: int = 0
    start_timeout_s: float = 180.0
    stop_timeout_s: float = 30.0
    run_dir: Path | None = None
    venv: Path | None = None
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file and tls_key_file go together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError("tls_client_ca_file needs tls_cert_file")
        ports = {"grpc": self.grpc_port, "http": self.http_port, "metrics": self.metrics_port}
        for what, port in ports.items():
            if not 1 <= port <= 65535:
                raise ConfigError(f"{what} port must be in 1..65535, got {port}")
        if len(set(ports.values())) != len(ports):
            raise ConfigError(f"the grpc, http and metrics ports must differ, got {ports}")
        if self.max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_queue_size < 0:
            raise ConfigError(f"max_queue_size must be >= 0, got {self.max_queue_size}")
        if self.start_timeout_s <= 0 or self.stop_timeout_s < 0:
            raise ConfigError("start_timeout_s must be > 0 and stop_timeout_s >= 0")

    @property
    def grpc_url(self) -> str:
        host = "127.0.0.1" if self.address in ("0.0.0.0", "") else self.address
        return f"{host}:{self.grpc_port}"

    def resolved_run_dir(self) -> Path:
        return self.run_dir or cache_root() / "serve" / f"triton-{self.grpc_port}"


@dataclass(frozen=True)
class ServerInfo:
    """Content of the pid file of a running server."""

    pid: int
    grpc_url: str
    http_port: int
    metrics_port: int
    model_name: str
    log_path: str
    started_at: float


def read_pid_file(run_dir: Path) -> ServerInfo | None:
    """The server recorded in ``run_dir``, or None if there is no (valid) pid file."""
    try:
        data = json.loads((run_dir / "server.pid").read_text(encoding="utf-8"))
        return ServerInfo(**data)
    except (OSError, json.JSONDecodeError, TypeError):
        return None


def _runs_app(cmdline: list[bytes]) -> bool:
    return any(_APP.name.encode() in arg for arg in cmdline)


def is_server_process(pid: int) -> bool:
    """True when ``pid`` is alive and runs the PyTriton app (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return _runs_app(cmdline.split(b"\0"))


class TritonServer(LocalServer):
    """A local Triton server process serving one exported embedding model.

    Use it as a context manager (start on enter, stop on exit), or call
    :meth:`start` / :meth:`stop` yourself. Not thread-safe. The lifecycle (launch,
    readiness wait, pid file, SIGTERM then SIGKILL) is :class:`LocalServer`'s; the
    pid file is ``run_dir/server.pid`` (JSON, see :class:`ServerInfo`), and
    :meth:`stop` stops only the server this object started (:func:`stop_detached`
    stops one another process left running).

    Args:
        options: Ports, model and time bounds.
        progress: Receives progress lines (venv build, start-up); default: the logger.

    Example:
        >>> opts = TritonServerOptions(grpc_port=free_port())  # doctest: +SKIP
        >>> with TritonServer(opts) as server:  # doctest: +SKIP
        ...     print(server.grpc_url)
    """

    what = "Triton server"
    state_stem = "server"
    command = "serve"
    error = SetupError
    adopts = False

    def __init__(
        self, options: TritonServerOptions | None = None, *, progress: Progress | None = None
    ) -> None:
        self.options = options or TritonServerOptions()
        super().__init__(
            self.options.resolved_run_dir(), self.options.address, self.options.grpc_port
        )
        self.stop_timeout_s = self.options.stop_timeout_s
        self._say = progress or log.info
        self._log_offset = 0
        self._model_name = ""
        # Shared-memory files the server's group mapped, listed before it is signalled.
        self._segments: set[Path] = set()
        #: Seconds from spawn to model ready, per start (the last one is the latest).
        self.start_times_s: list[float] = []

    # -- properties --------------------------------------------------------------------

    @property
    def grpc_url(self) -> str:
        """``host:port`` for ``TritonConfig.url``."""
        return self.options.grpc_url

    @property
    def run_dir(self) -> Path:
        return self.options.resolved_run_dir()

    @property
    def log_path(self) -> Path:
        return self.run_dir / "server.log"

    @property
    def pid_path(self) -> Path:
        return self.run_dir / "server.pid"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def model_name(self) -> str:
        """The served model's name (from the manifest), known after :meth:`start`."""
        return self._model_name

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> TritonServer:
        """Spawn the server and wait until the model is ready on the gRPC endpoint.

        Returns:
            ``self``.

        Raises:
            SetupError: The venv could not be built, the artifacts are missing, a port is
                taken, or the server exited or was not ready within ``start_timeout_s``;
                the message ends with the server log tail.
        """
        if self.is_running():
            return self
        from flinkai.models.artifacts import artifacts_dir, read_manifest

        opts = self.options
        model_dir = artifacts_dir(opts.model)
        manifest = read_manifest(model_dir)  # fails with "run flinkai model export"
        self._model_name = manifest.name
        self._check_not_running()
        venv = ensure_server_venv(opts.venv, progress=self._say)
        for what, port in (
            ("grpc", opts.grpc_port),
            ("http", opts.http_port),
            ("metrics", opts.metrics_port),
        ):
            if not _free_on(opts.address, port):
                raise SetupError(
                    f"{what} port {opts.address}:{port} is in use; pick another one "
                    f"(--port / --http-port / --metrics-port) or stop what listens there"
                )
        run_dir = self.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        workspace = workspace_dir(run_dir, manifest.name, opts.grpc_port)
        # PyTriton refuses an existing workspace; a killed server leaves one behind.
        shutil.rmtree(workspace, ignore_errors=True)

        cmd = [
            str(_venv_python(venv)), str(_APP),
            "--model-dir", str(model_dir),
            "--workspace", str(workspace),
            "--address", opts.address,
            "--grpc-port", str(opts.grpc_port),
            "--http-port", str(opts.http_port),
            "--metrics-port", str(opts.metrics_port),
            "--max-batch-size", str(opts.max_batch_size),
            "--max-queue-delay-us", str(opts.max_queue_delay_us),
            "--max-queue-size", str(opts.max_queue_size),
            "--threads", str(opts.threads),
        ]  # fmt: skip
        for flag, path in (
            ("--grpc-server-cert", opts.tls_cert_file),
            ("--grpc-server-key", opts.tls_key_file),
            ("--grpc-root-cert", opts.tls_client_ca_file),
        ):
            if path:
                cmd += [flag, str(Path(path).expanduser().absolute())]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # The server venv must not see this venv's packages (numpy 2 vs <2).
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        with self.log_path.open("ab") as logf:
            self._log_offset = logf.tell()
            logf.write(f"\n==== flinkai: starting {' '.join(cmd)}\n".encode())
        probe = _Readiness(self.options, self._model_name)
        self._say(
            f"starting Triton for {manifest.name}@{manifest.version} on grpc "
            f"{self.grpc_url}; waiting for the model (log: {self.log_path})"
        )
        try:
            # Own process group: stop/kill reach tritonserver and the backend stubs. A
            # failed start is killed at once (fail_grace_s=0), as before.
            elapsed = self._launch(
                cmd,
                self.log_path,
                probe.ready,
                opts.start_timeout_s,
                cwd=run_dir,
                env=env,
                poll_s=0.25,
                not_ready=lambda: probe.last_error,
                fail_grace_s=0.0,
            )
        finally:
            probe.close()
        self.start_times_s.append(elapsed)
        self._say(f"Triton ready in {elapsed:.1f}s: model {manifest.name} on grpc {self.grpc_url}")
        return self

    def kill(self, timeout_s: float = 10.0) -> int:
        """SIGKILL the whole server process group at once (simulates a crash).

        Unlike :meth:`LocalServer.kill`, a no-op when this object's server is not
        running (as :meth:`stop` is).

        Returns:
            The pid killed, or 0 when none was running.
        """
        if self._own_pid() is None:
            self.stop()
            return 0
        return super().kill(timeout_s)

    def restart(self) -> TritonServer:
        """Stop (if running) and start again on the same ports."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the server wrote since the latest start."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def detach(self) -> ServerInfo:
        """Forget the child process and leave it running (for ``flinkai serve triton``).

        Returns:
            What the pid file records; :func:`stop_detached` stops it later.
        """
        info = read_pid_file(self.run_dir)
        if self._proc is None or info is None:
            raise SetupError("no running server to detach")
        # Popen would otherwise warn, when collected, that its child still runs: that is
        # the point here. The pid file (and stop_detached) take over from this object.
        self._proc.returncode = 0
        self._proc = None
        return info

    # -- what LocalServer asks of a server -------------------------------------------

    def _owns(self, cmdline: list[bytes]) -> bool:
        return _runs_app(cmdline)

    def _address(self, port: int) -> str:
        return self.grpc_url

    def _stop_hint(self) -> str:
        return f"stop it first: flinkai serve stop --port {self.options.grpc_port}"

    def _start_failed(self, code: int | None, timeout_s: float, detail: str) -> str:
        if code is not None:
            return (
                f"Triton exited with code {code} during start-up "
                f"(log: {self.log_path}):\n{self.log_tail()}"
            )
        return (
            f"Triton was not ready within {timeout_s:.0f}s on {self.grpc_url}{detail}; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def _record(self, pid: int) -> None:
        info = ServerInfo(
            pid=pid,
            grpc_url=self.grpc_url,
            http_port=self.options.http_port,
            metrics_port=self.options.metrics_port,
            model_name=self._model_name,
            log_path=str(self.log_path),
            started_at=time.time(),
        )
        with staged_file(self.pid_path, name="server.tmp") as stage:
            stage.path.write_text(json.dumps(asdict(info)) + "\n", encoding="utf-8")

    def _recorded_pid(self) -> int | None:
        info = read_pid_file(self.run_dir)
        return info.pid if info is not None else None

    def _recorded_port(self) -> int | None:
        return self.options.grpc_port if self._recorded_pid() is not None else None

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        # SIGTERM to the app alone (it shuts tritonserver down); SIGKILL to the group.
        if sig == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal_group(pid, sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _terminate(self, pid: int, grace_s: float, kill_wait_s: float = 10.0) -> None:
        # Listed while the group still exists: afterwards nothing says what it used.
        self._segments = _group_shm_segments(pid)
        super()._terminate(pid, grace_s, kill_wait_s)

    def _after_exit(self, pid: int) -> None:
        # Also after a graceful exit: a stray tritonserver or stub must not keep the ports.
        kill_stragglers(pid)
        _remove_shm_segments(pid, self._segments)
        self._segments = set()
        if self._proc is not None and self._proc.pid == pid:
            self._proc = None  # reaped; pid and wait() answer for the next start only


class _Readiness:
    """Polls whether the server is live and the model ready; remembers why not."""

    def __init__(self, options: TritonServerOptions, model_name: str) -> None:
        self._model_name = model_name
        grpc: Any = require("tritonclient.grpc", "triton")
        self._grpc = grpc
        if options.tls_cert_file:
            # A TLS endpoint needs a client that trusts (and, for mTLS, is trusted by)
            # the server's CA; the loopback HTTP endpoint answers the same questions.
            self._client: Any = _HttpReadiness(options)
        else:
            self._client = grpc.InferenceServerClient(options.grpc_url)
        self.last_error = "no answer yet"

    def ready(self) -> bool:
        try:
            if self._client.is_server_live(client_timeout=2.0) and self._client.is_model_ready(
                self._model_name, client_timeout=2.0
            ):
                return True
            self.last_error = f"server live, model {self._model_name!r} not ready yet"
        except self._grpc.InferenceServerException as e:
            self.last_error = str(e)
        return False

    def close(self) -> None:
        self._client.close()


class _HttpReadiness:
    """Liveness and model readiness over Triton's HTTP endpoint (KServe v2 REST)."""

    def __init__(self, options: TritonServerOptions) -> None:
        host = "127.0.0.1" if options.address in ("0.0.0.0", "") else options.address
        self._base = f"http://{host}:{options.http_port}/v2"

    def _ok(self, path: str, timeout_s: float) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(self._base + path, timeout=timeout_s) as response:
                return bool(response.status == 200)
        except OSError:  # refused, timed out, or an HTTP error status (not ready)
            return False

    def is_server_live(self, client_timeout: float) -> bool:
        return self._ok("/health/live", client_timeout)

    def is_model_ready(self, name: str, client_timeout: float) -> bool:
        return self._ok(f"/models/{name}/ready", client_timeout)

    def close(self) -> None:
        pass


def _group_shm_segments(pgid: int) -> set[Path]:
    """Shared-memory files mapped by the processes of group ``pgid`` (read from /proc)."""
    found: set[Path] = set()
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc_dir / "stat").read_text()
            # Fields after "(comm)": state, ppid, pgrp, ...
            if int(stat.rpartition(")")[2].split()[2]) != pgid:
                continue
            maps = (proc_dir / "maps").read_text()
        except (OSError, ValueError, IndexError):
            continue  # the process exited meanwhile, or is not ours to read
        for line in maps.splitlines():
            _, sep, path = line.partition("/dev/shm/")
            if sep:
                found.add(Path("/dev/shm") / path.removesuffix(" (deleted)").strip())
    return found


def _remove_shm_segments(pid: int, segments: set[Path]) -> None:
    # A killed PyTriton cannot unlink its shared memory (the Python backend's regions,
    # named after the app's pid, and the tensor store's psm_* segments), so the
    # launcher does, limited to what this server's processes had mapped.
    for path in {*segments, *Path("/dev/shm").glob(f"pytrtion{pid}-*")}:
        with contextlib.suppress(OSError):
            path.unlink()


def stop_detached(run_dir: Path, *, timeout_s: float = 30.0) -> ServerInfo | None:
    """Stop the server a pid file in ``run_dir`` records (SIGTERM, then SIGKILL).

    Returns:
        The stopped server, or None when none was running (a stale pid file is removed).
    """
    info = read_pid_file(run_dir)
    server = TritonServer(TritonServerOptions(run_dir=run_dir, stop_timeout_s=timeout_s))
    return info if server.stop_recorded() else None
