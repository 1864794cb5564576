"""Build a Flink ``StreamTableEnvironment`` wired for flinkai.

Centralises the settings a user should never have to remember: the Python
interpreter for UDF workers (left unset, Flink uses whatever ``python`` is on PATH
and, without pyflink there, hangs), the UDF module folder, the connector jars,
Arrow/bundle sizes, and the config shipped to workers as a job parameter.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flinkai.config import Config
from flinkai.errors import ConfigError
from flinkai.metrics import reporter_jar, reporter_settings

if TYPE_CHECKING:
    from pyflink.table import StreamTableEnvironment

__all__ = [
    "BOUNDED_INPUT_KEY",
    "CONFIG_JOB_PARAMETER",
    "Target",
    "config_from_function_context",
    "create_table_env",
    "decode_config",
    "encode_config",
]

#: Job parameter carrying the resolved flinkai config to Python workers.
CONFIG_JOB_PARAMETER = "flinkai.config"
#: Set ("true") in the table config by the runner when a Kafka table of the script scans
#: with ``scan.bounded.mode``: operators then add no unbounded source of their own.
BOUNDED_INPUT_KEY = "flinkai.input.bounded"


@dataclass(frozen=True)
class Target:
    """Where the job runs: the embedded MiniCluster (``jobmanager=None``) or a remote cluster."""

    jobmanager: str | None = None

    @property
    def is_local(self) -> bool:
        return self.jobmanager is None

    def flink_settings(self) -> dict[str, str]:
        if self.jobmanager is None:
            return {}
        host, sep, port = self.jobmanager.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"--jobmanager must be host:port, got {self.jobmanager!r}")
        return {"execution.target": "remote", "rest.address": host, "rest.port": port}


def encode_config(config: Config) -> str:
    # base64 because global job parameters are a "k:v,k:v" string: JSON would break it.
    return base64.urlsafe_b64encode(config.to_json().encode()).decode()


def decode_config(value: str) -> Config:
    return Config.from_json(base64.urlsafe_b64decode(value.encode()).decode())


def flink_settings(
    config: Config, jars: list[Path], python_files: list[Path], target: Target
) -> dict[str, str]:
    """All Flink options the runner sets, as strings (testable without a JVM)."""
    rt = config.runtime
    settings = {
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "parallelism.default": str(rt.parallelism),
        "python.fn-execution.arrow.batch.size": str(rt.arrow_batch_size),
        "python.fn-execution.bundle.size": str(rt.python_bundle_size),
        "python.fn-execution.bundle.time": str(rt.python_bundle_time_ms),
        "pipeline.global-job-parameters": f"{CONFIG_JOB_PARAMETER}:{encode_config(config)}",
    }
    if rt.arrow_batch_size > rt.python_bundle_size:
        # Flink rejects an Arrow batch larger than the bundle; say so before the JVM does.
        raise ConfigError(
            "runtime.arrow_batch_size must not exceed runtime.python_bundle_size "
            f"({rt.arrow_batch_size} > {rt.python_bundle_size})"
        )
    if jars:
        settings["pipeline.jars"] = ";".join(p.resolve().as_uri() for p in jars)
    if python_files:
        settings["python.files"] = ",".join(str(p.resolve()) for p in python_files)
    if rt.checkpoint_interval_ms > 0:
        settings["execution.checkpointing.interval"] = f"{rt.checkpoint_interval_ms} ms"
        settings["execution.checkpointing.timeout"] = f"{rt.checkpoint_timeout_ms} ms"
        settings["execution.checkpointing.mode"] = "EXACTLY_ONCE"
    settings["restart-strategy.type"] = "fixed-delay"
    settings["restart-strategy.fixed-delay.attempts"] = str(rt.restart_attempts)
    settings["restart-strategy.fixed-delay.delay"] = f"{rt.restart_delay_ms} ms"
    if rt.prometheus_port:
        settings.update(reporter_settings(rt.prometheus_port))
    settings.update(target.flink_settings())
    settings.update({str(k): str(v) for k, v in rt.flink_conf.items()})
    return settings


def create_table_env(settings: dict[str, str]) -> StreamTableEnvironment:
    """A streaming ``StreamTableEnvironment`` with the given settings (see :func:`flink_settings`).

    It sits on a ``StreamExecutionEnvironment`` configured with the same settings,
    so scripts can pass tables through DataStream operators (``to_data_stream`` /
    ``from_data_stream``, see ``APPLY OPERATOR``) and those operators run in the
    same job as the script's INSERTs, with the same checkpointing, restart
    strategy and Python interpreter.
    """
    _reporter_on_gateway_classpath()
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    conf = Configuration()
    for key, value in settings.items():
        conf.set_string(key, value)
    if settings.get("execution.target") == "remote":
        stream_env = _remote_stream_env(conf)
    else:
        # Local runs, and application mode, where the cluster hands the driver its own
        # context environment (execution.target "embedded"): the context decides.
        stream_env = StreamExecutionEnvironment.get_execution_environment(conf)
    env = StreamTableEnvironment.create(
        stream_env, EnvironmentSettings.new_instance().in_streaming_mode().build()
    )
    # The table config is what SQL planning and statement sets read; set it too so
    # SET statements and the settings behave exactly as on a plain TableEnvironment.
    table_conf = env.get_config()
    for key, value in settings.items():
        table_conf.set(key, value)
    return env


def _remote_stream_env(conf: Any) -> Any:
    """A ``StreamExecutionEnvironment`` that is remote from birth.

    ``get_execution_environment`` builds a *local* environment when the client runs
    outside a Flink CLI, and PyFlink decides where Python workers run as soon as an
    environment exists: for a local one it starts a "loopback" worker pool inside this
    client process and ships the pool's address with the job. A remote TaskManager
    then asks this client to run the UDFs; once a detached client exits, the workers
    die ("Process died with exit code 0") and the job fails. Constructed with
    ``execution.target=remote`` already in its configuration, the environment never
    starts that pool, and each TaskManager runs its own Python workers.
    """
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_env = jvm.org.apache.flink.streaming.api.environment.StreamExecutionEnvironment(
        conf._j_configuration
    )
    return StreamExecutionEnvironment(j_env)


def _reporter_on_gateway_classpath() -> None:
    """Put Flink's Prometheus reporter on the classpath of the JVM PyFlink starts.

    A local job's MiniCluster runs in that JVM and, unlike a cluster, loads metric
    reporters from the classpath only, not from the plugins folder. PyFlink's
    launcher appends ``HADOOP_CLASSPATH`` to the JVM classpath, so the jar goes
    there, before the JVM starts (once started, its classpath is fixed). The
    reporter does nothing unless ``runtime.prometheus_port`` turns it on.
    """
    import os

    from pyflink.java_gateway import _gateway

    jar = reporter_jar()
    if _gateway is not None or jar is None:
        return
    current = os.environ.get("HADOOP_CLASSPATH", "")
    if str(jar) not in current.split(os.pathsep):
        os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(p for p in (current, str(jar)) if p)


def config_from_function_context(context: object) -> Config:
    """The config the runner shipped to this worker; local config when run elsewhere."""
    from flinkai.config import load_config

    get = getattr(context, "get_job_parameter", None)
    value = get(CONFIG_JOB_PARAMETER, "") if get is not None else ""
    return decode_config(value) if value else load_config()
