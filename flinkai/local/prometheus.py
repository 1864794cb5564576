"""A real Prometheus server on loopback, on the lifecycle every local server shares.

It scrapes what a deployment scrapes: Flink's Prometheus reporter on the JobManager and
each TaskManager (flinkai's operator metrics from the Python workers travel through
it), and ``flinkai.gpu_metrics``. Queries go through its HTTP API
(``/api/v1/query``), so the Helm chart's prometheus-adapter rules can be evaluated on
live series exactly as the adapter would send them.

Targets live in a file-based service discovery file (``targets.json`` in the data
dir): :meth:`LocalPrometheus.set_targets` rewrites it and Prometheus picks the change
up within a second, so a TaskManager that joins is scraped without a restart. Each
target carries its own labels; tests give them the ``namespace`` and ``pod`` labels a
PodMonitor would add in Kubernetes, which the adapter rules select on.

The binary is Debian's ``prometheus`` package (``apt-get install -y prometheus``, as
``.ci/run`` does), or any ``prometheus`` on ``PATH``, or ``$FLINKAI_PROMETHEUS``.

Example:
    >>> with LocalPrometheus(tmp / "prom", [ScrapeTarget("flink", "127.0.0.1:9249")]) as p:
    ...     p.query("up")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flinkai.local.errors import ServiceError, ServiceNotInstalled
from flinkai.local.process import (
    LOOPBACK,
    free_port,
    kill_stragglers,
    signal_group,
    tail,
    wait_until,
)
from flinkai.local.server import LocalServer

__all__ = [
    "INSTALL_HINT",
    "LocalPrometheus",
    "Sample",
    "ScrapeTarget",
    "prometheus_binary",
]

log = logging.getLogger(__name__)

#: How to get the binary on a Debian machine (what .ci/run runs).
INSTALL_HINT = "apt-get install -y prometheus"
#: Environment variable naming a prometheus binary to use instead of the one on PATH.
BINARY_ENV = "FLINKAI_PROMETHEUS"


def prometheus_binary() -> Path:
    """The ``prometheus`` executable: ``$FLINKAI_PROMETHEUS``, else the one on ``PATH``.

    Raises:
        ServiceNotInstalled: Neither exists; the message names the install command.
    """
    named = os.environ.get(BINARY_ENV)
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServiceNotInstalled(f"${BINARY_ENV}={named} is not an executable file")
        return path
    found = shutil.which("prometheus")
    if found is None:
        raise ServiceNotInstalled(
            "Prometheus is not installed (no `prometheus` on PATH). Install Debian's "
            f"package with `{INSTALL_HINT}` (.ci/run does), or set ${BINARY_ENV} to a "
            "prometheus binary"
        )
    return Path(found)


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint to scrape.

    Attributes:
        job: The ``job`` label of its series.
        address: ``host:port``.
        labels: Extra labels on every series scraped from it (e.g. ``namespace``, ``pod``).
        path: The metrics path.
    """

    job: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    path: str = "/metrics"

    def group(self) -> dict[str, Any]:
        """Its entry in a file_sd targets file."""
        # Labels from service discovery win over the scrape config's job and path.
        labels = {**self.labels, "job": self.job, "__metrics_path__": self.path}
        return {"targets": [self.address], "labels": labels}


@dataclass(frozen=True)
class Sample:
    """One element of a query result: its labels and value (a scalar has no labels)."""

    labels: dict[str, str]
    value: float


class LocalPrometheus(LocalServer):
    """A Prometheus child process with its own config and TSDB in ``data_dir``.

    Its pid and port files (``prometheus.pid``, ``prometheus.port``) are in the data
    dir, but :meth:`stop` stops only the server this object started.

    Args:
        data_dir: Folder for ``prometheus.yml``, ``targets.json``, ``tsdb/`` and the log.
        targets: What to scrape from the start (:meth:`set_targets` changes it later).
        scrape_interval_s: How often every target is scraped (also the rule and
            discovery refresh period). Whole seconds or fractions down to 0.5 s.
        port: Port of the HTTP API; a free loopback port when 0.
        start_timeout_s: How long :meth:`start` waits for ``/-/ready``.
    """

    what = "Prometheus server"
    state_stem = "prometheus"
    command = "prometheus"
    error = ServiceError
    adopts = False
    stop_timeout_s = 10.0

    def __init__(
        self,
        data_dir: Path,
        targets: Iterable[ScrapeTarget] = (),
        *,
        scrape_interval_s: float = 1.0,
        port: int = 0,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(data_dir, LOOPBACK, port)
        self.scrape_interval_s = scrape_interval_s
        self.start_timeout_s = start_timeout_s
        self._targets = list(targets)

    # -- files -------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.data_dir / "prometheus.yml"

    @property
    def targets_file(self) -> Path:
        return self.data_dir / "targets.json"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "prometheus.log"

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return f"http://{LOOPBACK}:{self.port}"

    def _write_config(self) -> None:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        # JSON is valid YAML: no YAML writer needed, and nothing to escape by hand.
        config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": [
                {
                    "job_name": "flinkai",
                    "file_sd_configs": [
                        {"files": [str(self.targets_file)], "refresh_interval": interval}
                    ],
                }
            ],
        }
        self.config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    def set_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Replace what is scraped; a running server picks it up within a refresh period."""
        self._targets = list(targets)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps([t.group() for t in self._targets], indent=2) + "\n"
        # Written whole, then renamed: discovery never reads half a file.
        tmp = self.targets_file.with_suffix(".json.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.targets_file)

    @property
    def targets(self) -> list[ScrapeTarget]:
        return list(self._targets)

    # -- lifecycle ---------------------------------------------------------------

    def running(self) -> bool:
        """Whether the server this object started is alive."""
        return self.is_running()

    def start(self) -> str:
        """Write the config and targets, launch Prometheus, wait until it is ready.

        Returns:
            :attr:`url`.

        Raises:
            ServiceNotInstalled: No prometheus binary (the message says how to install it).
            ServiceError: It is already running, exited, or was not ready in time (the
                message ends with its log).
        """
        if self.running():
            raise ServiceError(f"this Prometheus is already running at {self.url}")
        binary = prometheus_binary()
        self._check_not_running()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self._write_config()
        self.set_targets(self._targets)
        argv = [
            str(binary),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            # A local run only needs its own minutes; keeps the data dir small.
            "--storage.tsdb.retention.time=1d",
        ]
        log.info("starting Prometheus on %s (data dir %s)", self.url, self.data_dir)
        self._launch(argv, self.log_file, self._ready, self.start_timeout_s)
        return self.url

    def _start_failed(self, code: int | None, timeout_s: float, detail: str) -> str:
        what = "exited during start-up" if code is not None else "was not ready in time"
        return f"Prometheus {what} ({self.url}); log {self.log_file}:\n" + self.log_tail()

    def _stop_hint(self) -> str:
        return "stop it first"

    def _address(self, port: int) -> str:
        return f"http://{self.host}:{port}"

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        # The whole group, as for every service spawned in its own session.
        signal_group(pid, sig)

    def _after_exit(self, pid: int) -> None:
        kill_stragglers(pid)

    def _owns(self, cmdline: list[bytes]) -> bool:
        return os.fsencode(f"--config.file={self.config_file}") in cmdline

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(tail(self.log_file, lines))

    # -- HTTP API ----------------------------------------------------------------

    def api(self, path: str, params: Mapping[str, str] | list[tuple[str, str]]) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``.

        Raises:
            ServiceError: No answer, or Prometheus reported an error (a bad query).
        """
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=10.0) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            # Bad queries answer 400 with a JSON error body.
            detail = e.read().decode("utf-8", errors="replace")[:500]
            raise ServiceError(f"Prometheus {path}: HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ServiceError(f"Prometheus {path}: {e}") from e
        if body.get("status") != "success":
            raise ServiceError(f"Prometheus {path}: {body.get('error', body)}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Evaluate an instant query; a vector's samples, or one label-less sample for a scalar."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params)
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise ServiceError(f"query {promql!r} gave a {data['resultType']}, not a vector")
        return [Sample(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]

    def series(self, match: str) -> list[dict[str, str]]:
        """Label sets of the series a selector matches (``/api/v1/series``), as the adapter discovers them."""
        now = time.time()
        # Millisecond bounds: an end rounded down to the second can miss the only sample.
        span = [("start", f"{now - 3600:.3f}"), ("end", f"{now + 1:.3f}")]
        data = self.api("series", [("match[]", match), *span])
        return [dict(s) for s in data]

    def target_health(self) -> dict[str, str]:
        """``address`` -> ``up`` / ``down`` / ``unknown`` of every active target."""
        data = self.api("targets", {"state": "active"})
        return {
            str(t["labels"].get("instance", t.get("scrapeUrl"))): str(t["health"])
            for t in data.get("activeTargets", [])
        }

    def wait_for_targets(self, timeout_s: float = 30.0) -> dict[str, str]:
        """Block until every configured target was scraped successfully.

        Raises:
            ServiceError: One is still not ``up`` after ``timeout_s`` (the message
                holds every target's health).
        """
        want = {t.address for t in self._targets}
        health: dict[str, str] = {}

        def all_up() -> bool:
            nonlocal health
            health = self.target_health()
            return all(health.get(a) == "up" for a in want)

        if not wait_until(all_up, timeout_s, alive=self.running, poll_s=0.5):
            raise ServiceError(f"Prometheus targets not up after {timeout_s:.0f} s: {health}")
        return health
