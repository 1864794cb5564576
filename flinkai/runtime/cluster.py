"""A real standalone Flink session cluster on loopback, built from PyFlink's distribution.

The embedded MiniCluster runs everything inside the client's JVM, and PyFlink runs its
Python UDF workers as threads of the client Python process there ("loopback" mode), so
a MiniCluster cannot show what happens when a machine running tasks dies.
:class:`LocalFlinkCluster` starts a JobManager and TaskManagers as separate processes
that this object owns by PID, so a TaskManager can be SIGKILLed and replaced the way a
crashed host is, and the job's recovery can be observed through the REST API.

Everything it writes lives in one work dir::

    conf/config.yaml     generated Flink config (loopback, free ports, short heartbeats)
    conf/log4j-*.properties  copied from the distribution
    lib/                 symlinks: the distribution's lib/, flink-python, extra jars
    log/                 Flink's own logs plus each process's stdout (*.out)
    pid/                 pid files the Flink scripts keep
    checkpoints/         filesystem checkpoint storage
    tmp/                 ``io.tmp.dirs``: Python worker environments, spill files

Example:
    >>> with LocalFlinkCluster() as cluster:  # doctest: +SKIP
    ...     run_script(path, config, RunOptions(target=Target(cluster.jobmanager), wait=False))
    ...     cluster.kill_taskmanager()
    ...     cluster.start_taskmanager()
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from flinkai.errors import SetupError
from flinkai.local.process import (
    free_port,
    group_members,
    kill_stragglers,
    signal_group,
    spawn,
    stop_group,
    tail,
)

__all__ = [
    "FlinkRest",
    "LocalFlinkCluster",
    "TaskManagerProcess",
    "client_environment",
    "flink_home",
]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_LOG_TAIL_LINES = 40


def flink_home() -> Path:
    """The Flink distribution bundled in the ``apache-flink`` pip package.

    Raises:
        SetupError: PyFlink is not installed or its distribution is incomplete.
    """
    try:
        import pyflink
    except ImportError as e:
        raise SetupError("PyFlink (apache-flink) is not installed") from e
    home = Path(pyflink.__file__).resolve().parent
    if not (home / "bin" / "jobmanager.sh").is_file() or not list(home.glob("lib/flink-dist*.jar")):
        raise SetupError(f"PyFlink at {home} has no Flink distribution (bin/, lib/flink-dist*.jar)")
    return home


@dataclass
class TaskManagerProcess:
    """One TaskManager this cluster started.

    Attributes:
        resource_id: Its ``taskmanager.resource-id``: the id the REST API lists it under.
        proc: The TaskManager JVM (the scripts ``exec`` into Java, so this is the JVM).
        out_file: Its stdout and stderr.
    """

    resource_id: str
    proc: subprocess.Popen[bytes]
    out_file: Path

    @property
    def pid(self) -> int:
        """The JVM's process id (also its process group id)."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the JVM still runs."""
        return self.proc.poll() is None


#: Environment a local PyFlink job leaves in the client process (and PyFlink's own
#: worker-mode switch); never passed to a cluster.
_LEAKED_WORKER_ENV = (
    "_python_worker_execution_mode",
    "PYTHON_LOOPBACK_SERVER_ADDRESS",
    "WORKER_ID",
    "PIPELINE_OPTIONS",
    "SEMI_PERSISTENT_DIRECTORY",
    "LOGGING_API_SERVICE_DESCRIPTOR",
    "CONTROL_API_SERVICE_DESCRIPTOR",
    # Set by a loopback worker in its client; a child Python seeing it refuses to start Flink.
    "PYFLINK_GATEWAY_DISABLED",
)


def client_environment() -> dict[str, str]:
    """This process's environment without what a local PyFlink job left in it.

    What a user's shell would have: a ``flinkai`` subprocess started from a process that
    ran a MiniCluster job (a test session, a notebook) must not inherit worker settings.
    """
    env = dict(os.environ)
    for name in _LEAKED_WORKER_ENV:
        env.pop(name, None)
    return env


def _stock_java_opts(home: Path) -> str:
    """``env.java.opts.all`` of the distribution's own config.yaml."""
    import yaml

    stock = yaml.safe_load((home / "conf" / "config.yaml").read_text(encoding="utf-8")) or {}
    opts = stock.get("env", {}).get("java", {}).get("opts", {}).get("all")
    return str(opts) if opts else "--add-opens=java.base/java.nio=ALL-UNNAMED"


class FlinkRest:
    """Client for a Flink REST API (a session cluster or a MiniCluster).

    A MiniCluster serves the same API when the job sets ``rest.port``.

    Args:
        address: ``host:port`` of the REST endpoint.
    """

    def __init__(self, address: str) -> None:
        self.address = address

    def get(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET a path (``/jobs/<id>``) and decode its JSON.

        Raises:
            SetupError: The API did not answer or answered with an error.
        """
        url = f"http://{self.address}" + ("" if path.startswith("/") else "/") + path
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", errors="replace")[:500]
            raise SetupError(f"Flink REST {path}: HTTP {e.code}: {body}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise SetupError(f"Flink REST {path}: {e}") from e

    def cancel(self, job_id: str, timeout_s: float = 5.0) -> None:
        """Ask the cluster to cancel a job (``PATCH /jobs/<id>``); returns at once.

        Raises:
            SetupError: The API did not answer or refused.
        """
        url = f"http://{self.address}/jobs/{job_id}?mode=cancel"
        request = urllib.request.Request(url, method="PATCH")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s):
                return
        except (urllib.error.URLError, OSError) as e:
            raise SetupError(f"Flink REST cancel {job_id}: {e}") from e

    def taskmanagers(self) -> list[str]:
        """Ids of the registered TaskManagers; empty when the API does not answer."""
        try:
            data = self.get("/taskmanagers", timeout_s=2.0)
        except SetupError:
            return []
        return [str(t.get("id")) for t in data.get("taskmanagers", [])]

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's details: ``state``, ``vertices`` (each with ``status``), timestamps."""
        data: dict[str, Any] = self.get(f"/jobs/{job_id}")
        return data

    def job_status(self, job_id: str) -> str:
        """The job's state (``RUNNING``, ``RESTARTING``, ``FAILED``, ...)."""
        return str(self.job(job_id).get("state"))

    def tasks_running(self, job_id: str) -> bool:
        """Whether the job and every one of its vertices are ``RUNNING``.

        A vertex turns ``RUNNING`` after its operators are open, so Python UDF
        workers are up by then.
        """
        job = self.job(job_id)
        vertices = job.get("vertices", [])
        return (
            job.get("state") == "RUNNING"
            and bool(vertices)
            and all(v.get("status") == "RUNNING" for v in vertices)
        )

    def subtask_times(self, job_id: str) -> list[dict[str, int]]:
        """Per subtask of every vertex: state name -> epoch ms it entered that state.

        Covers the current execution attempt (after a restart: the new one).
        """
        out: list[dict[str, int]] = []
        for vertex in self.job(job_id).get("vertices", []):
            data = self.get(f"/jobs/{job_id}/vertices/{vertex['id']}/subtasktimes")
            for sub in data.get("subtasks", []):
                out.append({str(k): int(v) for k, v in (sub.get("timestamps") or {}).items()})
        return out

    def job_exceptions(self, job_id: str) -> list[dict[str, Any]]:
        """The job's exception history, newest first.

        Each entry has ``exceptionName``, ``stacktrace``, ``timestamp`` (epoch ms)
        and, where known, ``taskManagerId``.
        """
        data = self.get(f"/jobs/{job_id}/exceptions?maxExceptions=50")
        return list(data.get("exceptionHistory", {}).get("entries", []))

    def restarts(self, job_id: str) -> int:
        """How often the job restarted (the ``numRestarts`` job metric).

        Falls back to the exception history's length where the metric is not
        reported yet.
        """
        metrics = self.get(f"/jobs/{job_id}/metrics?get=numRestarts")
        for m in metrics if isinstance(metrics, list) else []:
            if m.get("id") == "numRestarts":
                return int(float(m.get("value", 0)))
        return len(self.job_exceptions(job_id))

    def checkpoints(self, job_id: str) -> dict[str, Any]:
        """The job's checkpoint statistics (``counts``, ``latest.completed``, ...)."""
        data: dict[str, Any] = self.get(f"/jobs/{job_id}/checkpoints")
        return data

    def latest_checkpoint_ack_ms(self, job_id: str) -> int:
        """Epoch ms when the latest completed checkpoint was acknowledged; 0 if none."""
        completed = (self.checkpoints(job_id).get("latest") or {}).get("completed") or {}
        return int(completed.get("latest_ack_timestamp") or 0)


class LocalFlinkCluster:
    """A standalone Flink session cluster: one JobManager and N TaskManagers on loopback.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. Every
    process is a child of this Python process, started in its own session, and is
    only ever signalled by its PID (or its own process group).

    Args:
        work_dir: Folder for config, logs, pids and checkpoints; a new temp dir when
            ``None`` (removed by :meth:`stop` unless ``keep_work_dir``).
        slots: ``taskmanager.numberOfTaskSlots`` per TaskManager.
        taskmanagers: How many TaskManagers :meth:`start` launches.
        jobmanager_memory: ``jobmanager.memory.process.size``.
        taskmanager_memory: ``taskmanager.memory.process.size``.
        heartbeat_interval_ms: ``heartbeat.interval``; short so a dead TaskManager is
            noticed within seconds instead of the default 50 s timeout.
        heartbeat_timeout_ms: ``heartbeat.timeout``.
        extra_jars: Jars linked into ``lib/`` besides flink-python; defaults to the
            Kafka connector from ``flinkai setup`` when it is there.
        flink_conf: Further config entries; they win over the generated ones.
        start_timeout_s: How long :meth:`start` and :meth:`start_taskmanager` wait for
            the REST API and for a TaskManager to register.
        keep_work_dir: Keep a temp work dir after :meth:`stop` (for post-mortems).
        application: Arguments of Flink's ``standalone-job`` entry point (application
            mode, as the Helm chart runs it, e.g. ``["-pym", "flinkai.cli.main", "run",
            "jobs/embed_clicks.sql"]``); the JobManager then runs that one job's driver
            itself. ``None`` starts a session cluster that takes submitted jobs.
        prometheus: Turn on Flink's Prometheus reporter, each process on its own free
            loopback port (:attr:`metrics_addresses`), as each pod serves its own.
    """

    def __init__(
        self,
        work_dir: str | Path | None = None,
        *,
        slots: int = 1,
        taskmanagers: int = 1,
        jobmanager_memory: str = "1024m",
        taskmanager_memory: str = "2048m",
        heartbeat_interval_ms: int = 1000,
        heartbeat_timeout_ms: int = 5000,
        extra_jars: Sequence[str | Path] | None = None,
        flink_conf: Mapping[str, str] | None = None,
        start_timeout_s: float = 120.0,
        keep_work_dir: bool = False,
        application: Sequence[str] | None = None,
        prometheus: bool = False,
    ) -> None:
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir).resolve() if work_dir else None
        self.slots = slots
        self.initial_taskmanagers = taskmanagers
        self.jobmanager_memory = jobmanager_memory
        self.taskmanager_memory = taskmanager_memory
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.extra_jars = [Path(p) for p in extra_jars] if extra_jars is not None else None
        self.flink_conf = dict(flink_conf or {})
        self.start_timeout_s = start_timeout_s
        self.keep_work_dir = keep_work_dir
        self.application = list(application) if application is not None else None
        self.prometheus = prometheus
        #: Process name (``jobmanager``, a TaskManager's resource id) -> ``host:port`` of
        #: its Prometheus reporter; filled as processes start, with ``prometheus`` on.
        self.metrics_addresses: dict[str, str] = {}
        self.rest_port = 0
        self.rpc_port = 0
        self._jm: subprocess.Popen[bytes] | None = None
        self._tms: list[TaskManagerProcess] = []
        self._tm_counter = 0

    # -- paths and addresses ---------------------------------------------------

    @property
    def jobmanager(self) -> str:
        """``127.0.0.1:<rest port>``: what :class:`~flinkai.runtime.environment.Target` takes."""
        return f"{HOST}:{self.rest_port}"

    @property
    def rest_url(self) -> str:
        """Base URL of the REST API."""
        return f"http://{HOST}:{self.rest_port}"

    def _dir(self, name: str) -> Path:
        if self.work_dir is None:
            raise SetupError("the Flink cluster has not been started")
        return self.work_dir / name

    @property
    def conf_dir(self) -> Path:
        """``FLINK_CONF_DIR``."""
        return self._dir("conf")

    @property
    def lib_dir(self) -> Path:
        """``FLINK_LIB_DIR``."""
        return self._dir("lib")

    @property
    def log_dir(self) -> Path:
        """``FLINK_LOG_DIR``: Flink's logs and each process's ``*.out``."""
        return self._dir("log")

    @property
    def jobmanager_pid(self) -> int | None:
        """PID of the JobManager JVM while it runs."""
        return self._jm.pid if self._jm is not None and self._jm.poll() is None else None

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> LocalFlinkCluster:
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
        """Write the config, start the JobManager and TaskManagers, wait until registered.

        Returns:
            :attr:`jobmanager` (``host:rest-port``).

        Raises:
            SetupError: Java or the distribution is missing, or a process died or did
                not come up within ``start_timeout_s`` (the message ends with its log).
        """
        if self._jm is not None:
            raise SetupError(f"this Flink cluster is already running at {self.jobmanager}")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise SetupError("Java is not installed (no java on PATH and JAVA_HOME unset)")
        home = flink_home()
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="flinkai-cluster-"))
        for name in ("conf", "lib", "log", "pid", "checkpoints", "tmp"):
            (self.work_dir / name).mkdir(parents=True, exist_ok=True)
        self.rest_port, self.rpc_port = free_port(HOST), free_port(HOST)
        self._write_conf(home)
        self._link_lib(home)
        try:
            self._start_jobmanager(home)
            for _ in range(self.initial_taskmanagers):
                self.start_taskmanager()
        except BaseException:
            self.stop()
            raise
        return self.jobmanager

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop every process this cluster started: SIGTERM, then SIGKILL after ``grace_s``."""
        procs = [tm.proc for tm in self._tms] + ([self._jm] if self._jm is not None else [])
        for proc in procs:
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("Flink process %d ignored SIGTERM; killing it", proc.pid)
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            kill_stragglers(proc.pid)
        self._jm = None
        self._tms = []
        self.metrics_addresses = {}
        if self._own_work_dir and not self.keep_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def _write_conf(self, home: Path) -> None:
        import sys

        conf: dict[str, str] = {
            "jobmanager.rpc.address": HOST,
            "jobmanager.rpc.port": str(self.rpc_port),
            "jobmanager.bind-host": HOST,
            "taskmanager.bind-host": HOST,
            "taskmanager.host": HOST,
            "rest.address": HOST,
            "rest.bind-address": HOST,
            "rest.port": str(self.rest_port),
            "taskmanager.numberOfTaskSlots": str(self.slots),
            "jobmanager.memory.process.size": self.jobmanager_memory,
            "taskmanager.memory.process.size": self.taskmanager_memory,
            "parallelism.default": "1",
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            "heartbeat.interval": str(self.heartbeat_interval_ms),
            "heartbeat.timeout": str(self.heartbeat_timeout_ms),
            "execution.checkpointing.dir": self._dir("checkpoints").as_uri(),
            # Fresh REST answers for tests and benchmarks: job details are cached for
            # 3 s and metrics fetched every 10 s by default.
            "web.refresh-interval": "500",
            "metrics.fetcher.update-interval": "1000",
            # Python worker dirs and spilled files stay in the work dir, not /tmp.
            "io.tmp.dirs": str(self._dir("tmp")),
            # Java 17 module opens (Arrow for pandas UDFs needs java.nio): the stock
            # config carries them, so a generated one must too.
            "env.java.opts.all": _stock_java_opts(home),
        }
        if self.prometheus:
            from flinkai.metrics import reporter_settings

            # The port is set per process (-D at start); this one is only a default.
            conf.update(reporter_settings(0))
        conf.update(self.flink_conf)
        # Flat keys are valid in Flink 2's config.yaml; JSON strings are valid YAML scalars.
        text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in conf.items())
        (self.conf_dir / "config.yaml").write_text(text, encoding="utf-8")
        for name in (
            "log4j-console.properties",
            "log4j.properties",
            "log4j-cli.properties",
            "logback-console.xml",
        ):
            src = home / "conf" / name
            if src.is_file():
                shutil.copyfile(src, self.conf_dir / name)

    def _link_lib(self, home: Path) -> None:
        jars = sorted((home / "lib").glob("*.jar"))
        python_jars = sorted((home / "opt").glob("flink-python*.jar"))
        if not python_jars:
            raise SetupError(f"flink-python jar not found in {home / 'opt'}")
        extra = self.extra_jars
        if extra is None:
            from flinkai.runtime.jars import find_jars

            extra = find_jars("connector")
        for jar in [*jars, *python_jars, *extra]:
            link = self.lib_dir / jar.name
            if not link.exists():
                link.symlink_to(jar.resolve())

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "FLINK_CONF_DIR": str(self.conf_dir),
                "FLINK_LIB_DIR": str(self.lib_dir),
                "FLINK_LOG_DIR": str(self.log_dir),
                "FLINK_PID_DIR": str(self._dir("pid")),
            }
        )
        # Nothing of a local job may leak into the cluster: a client-side worker-mode
        # override, nor the variables PyFlink's loopback pool copies into this process
        # after a local job ran here. With PYTHON_LOOPBACK_SERVER_ADDRESS inherited, the
        # TaskManager's workers would connect back and run the UDFs in this process.
        for name in _LEAKED_WORKER_ENV:
            env.pop(name, None)
        return env

    def _spawn(
        self, home: Path, script: str, args: list[str], out_file: Path
    ) -> subprocess.Popen[bytes]:
        # Own session: a kill can take the JVM's Python workers along (flinkai.local).
        return spawn(
            ["bash", str(home / "bin" / script), "start-foreground", *args],
            out_file,
            cwd=self.work_dir,
            env=self._env(),
        )

    def _start_jobmanager(self, home: Path) -> None:
        out_file = self.log_dir / "jobmanager.out"
        log.info("starting Flink JobManager on %s (work dir %s)", self.jobmanager, self.work_dir)
        dynamic = self._reporter_args("jobmanager")
        if self.application is None:
            self._jm = self._spawn(home, "jobmanager.sh", dynamic, out_file)
        else:
            self._jm = self._spawn(
                home, "standalone-job.sh", [*dynamic, *self.application], out_file
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._jm.poll() is not None:
                raise self._setup_error("the Flink JobManager exited during start-up", out_file)
            try:
                self.rest("/overview", timeout_s=2.0)
                return
            except SetupError:
                time.sleep(0.5)
        raise self._setup_error(
            f"the Flink JobManager's REST API did not answer within {self.start_timeout_s:.0f} s",
            out_file,
        )

    def start_taskmanager(self, wait: bool = True) -> TaskManagerProcess:
        """Launch one more TaskManager.

        Args:
            wait: Block until the REST API lists it (bounded by ``start_timeout_s``).

        Returns:
            The new TaskManager.

        Raises:
            SetupError: The cluster is not running, or the TaskManager died or did not
                register in time.
        """
        if self.jobmanager_pid is None:
            raise SetupError("the Flink JobManager is not running")
        home = flink_home()
        self._tm_counter += 1
        resource_id = f"tm-{self._tm_counter}"
        out_file = self.log_dir / f"taskmanager-{self._tm_counter}.out"
        args = ["-D", f"taskmanager.resource-id={resource_id}", *self._reporter_args(resource_id)]
        proc = self._spawn(home, "taskmanager.sh", args, out_file)
        tm = TaskManagerProcess(resource_id, proc, out_file)
        self._tms.append(tm)
        log.info("started Flink TaskManager %s (pid %d)", resource_id, proc.pid)
        if wait:
            self.wait_for_taskmanager(tm)
        return tm

    def _reporter_args(self, name: str) -> list[str]:
        """``-D`` for the process's own reporter port (none with ``prometheus`` off)."""
        if not self.prometheus:
            return []
        port = free_port(HOST)
        self.metrics_addresses[name] = f"{HOST}:{port}"
        return ["-D", f"metrics.reporter.prom.port={port}"]

    def wait_for_taskmanager(self, tm: TaskManagerProcess, timeout_s: float | None = None) -> None:
        """Block until the REST API lists ``tm`` as registered.

        Raises:
            SetupError: It died or did not register within the timeout.
        """
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while time.monotonic() < deadline:
            if not tm.alive():
                raise self._setup_error(f"Flink TaskManager {tm.resource_id} exited", tm.out_file)
            if tm.resource_id in self.registered_taskmanagers():
                return
            time.sleep(0.5)
        raise self._setup_error(
            f"Flink TaskManager {tm.resource_id} did not register within "
            f"{timeout_s or self.start_timeout_s:.0f} s",
            tm.out_file,
        )

    def _setup_error(self, what: str, out_file: Path) -> SetupError:
        lines = tail(out_file)
        logs = sorted(self.log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
        if logs:
            lines += [f"--- {logs[-1].name}", *tail(logs[-1])]
        return SetupError(f"{what}; work dir {self.work_dir}\n" + "\n".join(lines))

    # -- fault injection -------------------------------------------------------

    def taskmanagers(self) -> list[TaskManagerProcess]:
        """TaskManagers started by this cluster that are still running."""
        return [tm for tm in self._tms if tm.alive()]

    def exited_taskmanagers(self) -> list[TaskManagerProcess]:
        """TaskManagers started by this cluster whose process has ended (stopped or died)."""
        return [tm for tm in self._tms if not tm.alive()]

    def taskmanager_pids(self) -> list[int]:
        """PIDs of the running TaskManager JVMs this cluster started."""
        return [tm.pid for tm in self.taskmanagers()]

    def taskmanager_children(self) -> dict[int, str]:
        """pid -> command line of every process in the running TaskManagers' groups.

        Shows the Python UDF workers each TaskManager spawned (Linux /proc).
        """
        out: dict[int, str] = {}
        for leader in self.taskmanager_pids():
            for pid in group_members(leader):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue  # exited while we looked
                if pid != leader:
                    out[pid] = cmd.replace(b"\0", b" ").decode(errors="replace").strip()
        return out

    def _chosen_taskmanager(self, tm: TaskManagerProcess | None, verb: str) -> TaskManagerProcess:
        """``tm``, or the most recently started running TaskManager when ``None``."""
        if tm is not None:
            return tm
        running = self.taskmanagers()
        if not running:
            raise SetupError(f"no running TaskManager to {verb}")
        return running[-1]

    def kill_taskmanager(self, tm: TaskManagerProcess | None = None) -> TaskManagerProcess:
        """SIGKILL a TaskManager and its Python workers, as if its host died.

        Args:
            tm: Which one; the most recently started running one when ``None``.

        Returns:
            The killed TaskManager (reaped).

        Raises:
            SetupError: No TaskManager of this cluster is running.
        """
        tm = self._chosen_taskmanager(tm, "kill")
        log.info("SIGKILL Flink TaskManager %s (pid %d)", tm.resource_id, tm.pid)
        if tm.alive():
            signal_group(tm.pid, signal.SIGKILL)
        tm.proc.wait(timeout=10)
        kill_stragglers(tm.pid)
        return tm

    def stop_taskmanager(
        self, tm: TaskManagerProcess | None = None, grace_s: float = 30.0
    ) -> TaskManagerProcess:
        """SIGTERM a TaskManager's group and wait, as Kubernetes deletes a pod on scale-down.

        Flink shuts the TaskManager down and the JobManager sees it leave; in reactive
        mode the job then restarts at the slots that are left. SIGKILL follows after
        ``grace_s`` if it has not exited.

        Args:
            tm: Which one; the most recently started running one when ``None``.

        Returns:
            The stopped TaskManager (reaped).

        Raises:
            SetupError: No TaskManager of this cluster is running.
        """
        tm = self._chosen_taskmanager(tm, "stop")
        log.info("SIGTERM Flink TaskManager %s (pid %d)", tm.resource_id, tm.pid)
        stop_group(tm.proc, grace_s)
        return tm

    # -- REST ------------------------------------------------------------------

    @property
    def api(self) -> FlinkRest:
        """A client for this cluster's REST API."""
        return FlinkRest(self.jobmanager)

    def registered_taskmanagers(self) -> list[str]:
        """Resource ids of the TaskManagers the JobManager currently lists."""
        return self.api.taskmanagers()

    def rest(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET a REST API path (``/jobs/<id>``) and decode its JSON; see :meth:`FlinkRest.get`."""
        return self.api.get(path, timeout_s)

    def job_status(self, job_id: str) -> str:
        """The job's state; see :meth:`FlinkRest.job_status`."""
        return self.api.job_status(job_id)

    def job_exceptions(self, job_id: str) -> list[dict[str, Any]]:
        """The job's exception history; see :meth:`FlinkRest.job_exceptions`."""
        return self.api.job_exceptions(job_id)

    def restarts(self, job_id: str) -> int:
        """How often the job restarted; see :meth:`FlinkRest.restarts`."""
        return self.api.restarts(job_id)

    def checkpoints(self, job_id: str) -> dict[str, Any]:
        """The job's checkpoint statistics; see :meth:`FlinkRest.checkpoints`."""
        return self.api.checkpoints(job_id)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The end of every log in the work dir, for failure reports."""
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            if path.suffix in (".log", ".out"):
                parts.append(f"--- {path.name}\n" + "\n".join(tail(path, lines)))
        return "\n".join(parts)
