"""Flink's own SQL Client and SQL Gateway, pointed at a flinkai cluster.

The PyFlink wheel ships ``bin/sql-client.sh``, ``bin/sql-gateway.sh`` and
``opt/flink-sql-client-*.jar``, but not ``flink-sql-gateway-*.jar``, which both tools
need; ``flinkai setup`` fetches it from Maven (pinned). :func:`opt_dir` builds an
``opt/`` folder with PyFlink's jars plus that one, and :func:`tool_environment` points
the scripts at it (``FLINK_OPT_DIR``) and at a cluster's config, lib and log folders.

What a job needs there is what the flinkai runner would set: the UDF folder
(``-pyfs`` / ``python.files``), the Python that has flinkai (``python.executable``,
``python.client.executable``) and the Kafka connector (``-j`` / ``pipeline.jars``).
No runner ships a config, so UDFs load theirs as a local process does: ``$FLINKAI_CONFIG``
(a file path) and ``FLINKAI_*`` variables in the TaskManagers' environment, else
``configs/default.yaml``. ``APPLY OPERATOR`` is a flinkai statement: those scripts need
``flinkai run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flinkai.errors import SetupError
from flinkai.local.process import spawn, stop_group
from flinkai.runtime.cluster import HOST, client_environment, flink_home
from flinkai.runtime.errors import JobFailedError
from flinkai.runtime.jars import connector_jars, gateway_jar

__all__ = [
    "SqlGatewayClient",
    "opt_dir",
    "python_settings",
    "sql_client_argv",
    "start_gateway",
    "statements",
    "tool_environment",
]


def opt_dir(folder: Path) -> Path:
    """``folder`` holding links to PyFlink's ``opt/`` jars and ``flink-sql-gateway``."""
    folder.mkdir(parents=True, exist_ok=True)
    for jar in [*sorted((flink_home() / "opt").glob("*.jar")), gateway_jar()]:
        link = folder / jar.name
        if not link.exists():
            link.symlink_to(jar.resolve())
    return folder


def tool_environment(conf_dir: Path, lib_dir: Path, log_dir: Path, opt: Path) -> dict[str, str]:
    """The environment for ``sql-client.sh`` / ``sql-gateway.sh`` against one cluster."""
    env = client_environment()
    env.update(
        {
            "FLINK_CONF_DIR": str(conf_dir),
            "FLINK_LIB_DIR": str(lib_dir),
            "FLINK_LOG_DIR": str(log_dir),
            "FLINK_OPT_DIR": str(opt),
        }
    )
    return env


def python_settings(udf_dir: Path, python: str = sys.executable) -> dict[str, str]:
    """What a Python UDF job needs, as Flink options (``SET`` or session properties)."""
    return {
        "python.files": str(udf_dir),
        "python.executable": python,
        "python.client.executable": python,
        "pipeline.jars": ";".join(j.resolve().as_uri() for j in connector_jars()),
    }


def sql_client_argv(
    script: Path,
    jobmanager: str,
    udf_dir: Path,
    python: str = sys.executable,
) -> list[str]:
    """``sql-client.sh -f script`` against ``HOST:PORT``, with flinkai's UDFs and Python."""
    host, port = jobmanager.rsplit(":", 1)
    argv = ["bash", str(flink_home() / "bin" / "sql-client.sh"), "-f", str(script)]
    for jar in connector_jars():
        argv += ["-j", str(jar)]
    argv += ["-pyfs", str(udf_dir), "-pyexec", python, "-pyclientexec", python]
    return [
        *argv,
        "-Dexecution.target=remote",
        f"-Drest.address={host}",
        f"-Drest.port={port}",
    ]


class SqlGatewayClient:
    """The SQL Gateway's REST API (v1 paths): sessions, statements, operation status.

    Args:
        port: The gateway's REST port on loopback.
        timeout_s: Per-request timeout.
    """

    def __init__(self, port: int, timeout_s: float = 30.0) -> None:
        self.base = f"http://{HOST}:{port}/v1"
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise JobFailedError(
                f"SQL Gateway {method} {path}: HTTP {e.code}: {detail[-2000:]}"
            ) from e
        except OSError as e:
            raise SetupError(f"SQL Gateway at {self.base} unreachable: {e}") from e
        return json.loads(text) if text else {}

    def ready(self) -> bool:
        """Whether the gateway answers ``/info``."""
        try:
            self._call("GET", "/info")
        except (SetupError, JobFailedError):
            return False
        return True

    def open_session(self, properties: Mapping[str, str]) -> str:
        """A new session with these Flink options; returns its handle."""
        answer = self._call("POST", "/sessions", {"properties": dict(properties)})
        return str(answer["sessionHandle"])

    def close_session(self, session: str) -> None:
        self._call("DELETE", f"/sessions/{session}")

    def submit(self, session: str, statement: str) -> str:
        """Submit one statement; returns its operation handle."""
        answer = self._call("POST", f"/sessions/{session}/statements", {"statement": statement})
        return str(answer["operationHandle"])

    def status(self, session: str, operation: str) -> str:
        """``RUNNING``, ``FINISHED``, ``ERROR``, ..."""
        answer = self._call("GET", f"/sessions/{session}/operations/{operation}/status")
        return str(answer["status"])

    def result(self, session: str, operation: str, token: int = 0) -> dict[str, Any]:
        """One page of an operation's result (an ``ERROR`` operation raises with its cause)."""
        answer = self._call("GET", f"/sessions/{session}/operations/{operation}/result/{token}")
        return dict(answer)

    def run(self, session: str, statement: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Submit, poll the status until it leaves ``RUNNING``, return the first result page.

        Raises:
            JobFailedError: The operation failed (with the gateway's cause) or did not
                finish within ``timeout_s``.
        """
        operation = self.submit(session, statement)
        deadline = time.monotonic() + timeout_s
        status = self.status(session, operation)
        while status in ("INITIALIZED", "PENDING", "RUNNING"):
            if time.monotonic() > deadline:
                raise JobFailedError(f"SQL Gateway: still {status} after {timeout_s:.0f} s")
            time.sleep(0.2)
            status = self.status(session, operation)
        if status != "FINISHED":
            self.result(session, operation)  # raises with the gateway's error text
            raise JobFailedError(f"SQL Gateway: operation ended {status}: {statement[:80]}")
        return self.result(session, operation)


def start_gateway(
    env: Mapping[str, str], port: int, out_file: Path, timeout_s: float = 120.0
) -> subprocess.Popen[bytes]:
    """``sql-gateway.sh start-foreground`` with its REST endpoint on ``HOST:port``.

    Returns the process once ``/v1/info`` answers; stop it with
    :func:`flinkai.local.process.stop_group`.
    """
    script = flink_home() / "bin" / "sql-gateway.sh"
    proc = spawn(
        [
            "bash",
            str(script),
            "start-foreground",
            f"-Dsql-gateway.endpoint.rest.address={HOST}",
            f"-Dsql-gateway.endpoint.rest.bind-address={HOST}",
            f"-Dsql-gateway.endpoint.rest.port={port}",
        ],
        out_file,
        env=env,
    )
    client = SqlGatewayClient(port, timeout_s=2.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SetupError(f"the SQL Gateway exited during start-up; see {out_file}")
        if client.ready():
            return proc
        time.sleep(0.5)
    stop_group(proc)
    raise SetupError(f"the SQL Gateway did not answer within {timeout_s:.0f} s; see {out_file}")


def statements(text: str) -> Sequence[str]:
    """The statements of a filled-in script, for the gateway (one per request)."""
    from flinkai.runtime.script import parse_script

    return [stmt.text for stmt in parse_script(text).statements]
