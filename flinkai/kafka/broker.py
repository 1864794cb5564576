"""A real single-node Kafka broker on loopback, for local runs and integration tests.

:class:`LocalKafka` runs Apache Kafka in KRaft combined mode (broker and controller
in one JVM) from the jars ``flinkai setup`` resolves. Everything it owns lives in
one data dir::

    server.properties   generated broker config (rewritten on every start)
    log4j2.properties   sends the broker's log to broker.log, not to our stdout
    broker.log          the broker's own log
    broker.out          JVM stdout/stderr (crashes before logging is up)
    broker.pid          pid of the running broker
    broker.port         its client port
    kraft-logs/         Kafka's log dir (topic data and the metadata log)

The pid and port files let ``flinkai kafka start`` leave the broker running in the
background and a later ``flinkai kafka status`` / ``stop`` find it from another
process. A pid is only trusted when its command line shows this data dir's
``server.properties``, so a recycled pid is never signalled.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flinkai.config import KafkaConfig
from flinkai.errors import SetupError
from flinkai.kafka.admin import describe_cluster
from flinkai.kafka.errors import BrokerUnavailableError
from flinkai.local.process import free_port, port_in_use, tail, tcp_open
from flinkai.local.server import LocalServer
from flinkai.paths import cache_root, jars_dir, package_dir

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_JVM_OPTIONS",
    "BrokerStatus",
    "LocalKafka",
    "SecureListener",
    "default_data_dir",
    "new_cluster_id",
]

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
_LOG_TAIL_LINES = 30
_OUT_TAIL_LINES = 10
_NODE_ID = 1

#: The JMX exporter's rules for :attr:`LocalKafka.metrics_port` (names as Strimzi's).
JMX_EXPORTER_RULES = package_dir() / "jvm" / "kafka-jmx-exporter.yaml"

#: JVM flags besides the heap. C1-only compilation cuts start-up by about a third on
#: small machines; a local broker is never the bottleneck, so peak JIT speed is not missed.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:TieredStopAtLevel=1",
)


@dataclass(frozen=True)
class BrokerStatus:
    """What :meth:`LocalKafka.status` found.

    Attributes:
        running: A broker process for this data dir is alive.
        data_dir: The data dir that was checked.
        pid: Its process id, when running.
        host: Host of its client listener.
        port: Its client port, when running.
        listening: The client port accepts TCP connections.
    """

    running: bool
    data_dir: Path
    pid: int | None = None
    host: str = DEFAULT_HOST
    port: int | None = None
    listening: bool = False

    @property
    def bootstrap(self) -> str | None:
        """``host:port`` for clients, or ``None`` when not running."""
        return f"{self.host}:{self.port}" if self.running and self.port else None


@dataclass(frozen=True)
class SecureListener:
    """A SASL_SSL client listener: TLS with the given key store, SCRAM users.

    The broker then runs two more listeners on loopback: ``INTERNAL`` (plain text,
    replication and flinkai's own readiness check) and ``CONTROLLER``. Clients are
    meant for the SASL_SSL one, :attr:`LocalKafka.bootstrap`.

    Attributes:
        keystore_pem: One PEM file with the broker's unencrypted PKCS#8 private key
            and its certificate chain.
        users: SCRAM user name -> password, created when the data dir is formatted
            (``kafka-storage format --add-scram``). The passwords pass through that
            tool's command line once: fine for a test broker, not for production.
        mechanism: ``SCRAM-SHA-512`` or ``SCRAM-SHA-256``.
        client_ca: PEM CA that client certificates must chain to; set, every client
            must present one (mutual TLS) besides logging in.
    """

    keystore_pem: Path
    users: Mapping[str, str]
    mechanism: str = "SCRAM-SHA-512"
    client_ca: Path | None = None

    def properties(self, host: str, port: int, internal_port: int) -> dict[str, str]:
        """The ``server.properties`` entries of the listeners (controller excluded)."""
        prefix = f"listener.name.sasl_ssl.{self.mechanism.lower()}"
        return {
            "listeners": f"SASL_SSL://{host}:{port},INTERNAL://{host}:{internal_port}",
            "advertised.listeners": f"SASL_SSL://{host}:{port},INTERNAL://{host}:{internal_port}",
            "listener.security.protocol.map": (
                "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": self.mechanism,
            # The server side of SCRAM checks stored credentials; it needs no user here.
            f"{prefix}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore_pem),
            **self._client_auth(),
        }

    def _client_auth(self) -> dict[str, str]:
        if self.client_ca is None:
            return {"ssl.client.auth": "none"}
        # A SASL_SSL listener ignores ssl.client.auth unless it carries the listener
        # prefix (KIP-684): without it, the broker would not ask for a certificate.
        prefix = "listener.name.sasl_ssl."
        return {
            f"{prefix}ssl.client.auth": "required",
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": str(self.client_ca),
        }

    def format_args(self) -> list[str]:
        """``--add-scram`` arguments of ``kafka-storage format``."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{self.mechanism}=[name={name},password={password}]"]
        return args


def default_data_dir() -> Path:
    """Where the local broker keeps its data unless told otherwise."""
    return cache_root() / "kafka"


def new_cluster_id() -> str:
    """A random KRaft cluster id in Kafka's format (URL-safe base64 of a UUID, no padding)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        # Kafka's own generator rejects ids starting with '-': they read as CLI flags.
        if not text.startswith("-"):
            return text


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\")


class LocalKafka(LocalServer):
    """A single-node KRaft Kafka broker running as a child JVM.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The broker
    keeps running after the Python process that started it exits (that is how
    ``flinkai kafka start`` works); any :class:`LocalKafka` for the same data dir
    can then report on it or stop it. :meth:`kill` (from :class:`LocalServer`) gives
    it no chance to shut down cleanly: open transactions stay open in its logs and
    the next :meth:`start` recovers them.

    Example:
        >>> with LocalKafka(tmp_path, port=free_port()) as kafka:  # doctest: +SKIP
        ...     create_topics(kafka.bootstrap, ["in"])

    Args:
        data_dir: Folder for config, logs, pid file and topic data; created if needed.
            Defaults to :func:`default_data_dir`.
        port: Client port; ``None`` or 0 picks a free one.
        controller_port: KRaft controller port; ``None`` reuses the one this data dir
            was started with before, else picks a free one.
        host: Address both listeners bind to and clients connect to.
        auto_create_topics: Let producers and consumers create topics on demand.
            Off by default: flinkai creates topics explicitly, so a typo fails loudly.
        heap: JVM ``-Xmx``.
        jvm_options: Further JVM flags (GC, JIT); see :data:`DEFAULT_JVM_OPTIONS`.
        start_timeout_s: How long :meth:`start` waits for the broker to serve requests.
        jars: Folder of the broker jars; defaults to ``jars_dir("kafka")``.
        java: ``java`` executable; defaults to ``$JAVA_HOME/bin/java``, then PATH.
        properties: Extra ``server.properties`` entries; they win over the generated ones.
        secure: Serve clients on a SASL_SSL listener instead of plain text.
        metrics_port: Serve the broker's metrics for Prometheus on this loopback port
            (``metrics_address``), through Prometheus's JMX exporter agent with the rules
            of :data:`JMX_EXPORTER_RULES`: log end offsets as
            ``kafka_log_log_logendoffset{topic,partition}``, Strimzi's name. ``None``:
            no endpoint.
    """

    what = "Kafka broker"
    state_stem = "broker"
    command = "kafka"
    error = SetupError
    stop_timeout_s = 30.0

    def __init__(
        self,
        data_dir: str | Path | None = None,
        port: int | None = None,
        *,
        controller_port: int | None = None,
        host: str = DEFAULT_HOST,
        auto_create_topics: bool = False,
        heap: str = "512m",
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        start_timeout_s: float = 60.0,
        jars: str | Path | None = None,
        java: str | None = None,
        properties: Mapping[str, str] | None = None,
        secure: SecureListener | None = None,
        metrics_port: int | None = None,
    ) -> None:
        super().__init__(Path(data_dir or default_data_dir()), host, port or free_port(host))
        self._controller_port = controller_port
        self.auto_create_topics = auto_create_topics
        self.heap = heap
        self.jvm_options = tuple(jvm_options)
        self.start_timeout_s = start_timeout_s
        self.jars = Path(jars) if jars else jars_dir("kafka")
        self._java = java
        self.properties = dict(properties or {})
        self.secure = secure
        self.metrics_port = metrics_port
        #: Plain-text replication listener of a secured broker (see SecureListener).
        self.internal_port = free_port(host) if secure else None
        #: Seconds the last successful :meth:`start` took from launch to ready.
        self.start_seconds: float | None = None

    @classmethod
    def from_config(
        cls,
        config: KafkaConfig,
        *,
        port: int | None = None,
        data_dir: str | Path | None = None,
    ) -> LocalKafka:
        """A broker set up from the ``kafka`` config section; arguments override it."""
        return cls(
            data_dir=data_dir or config.local_data_dir or None,
            port=port if port is not None else config.local_port,
            start_timeout_s=config.local_start_timeout_s,
        )

    # -- files in the data dir -------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` this object starts the broker on.

        For a broker another process started, :meth:`status` reads the port it runs on.
        """
        return f"{self.host}:{self.port}"

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the broker's Prometheus endpoint, if it serves one."""
        return None if self.metrics_port is None else f"{self.host}:{self.metrics_port}"

    def _metrics_agent(self) -> list[str]:
        """The JMX exporter's ``-javaagent`` flag, or nothing without ``metrics_port``."""
        if self.metrics_port is None:
            return []
        jars = sorted(jars_dir("jmx").glob("jmx_prometheus_javaagent-*.jar"))
        if not jars:
            raise SetupError(
                f"the JMX exporter agent is missing from {jars_dir('jmx')}; run `flinkai setup`"
            )
        return [f"-javaagent:{jars[-1]}={self.metrics_address}:{JMX_EXPORTER_RULES}"]

    @property
    def properties_file(self) -> Path:
        """The generated ``server.properties``."""
        return self.data_dir / "server.properties"

    @property
    def log_file(self) -> Path:
        """The broker's log."""
        return self.data_dir / "broker.log"

    @property
    def log_dir(self) -> Path:
        """Kafka's ``log.dirs``: topic partitions and the KRaft metadata log."""
        return self.data_dir / "kraft-logs"

    @property
    def _out_file(self) -> Path:
        return self.data_dir / "broker.out"

    @property
    def _log4j_file(self) -> Path:
        return self.data_dir / "log4j2.properties"

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> str:
        """Format the data dir if new, launch the broker and wait until it serves requests.

        Returns:
            The bootstrap address.

        Raises:
            SetupError: Jars or Java missing, a port already taken, a broker for this
                data dir already running, or the broker died or was not ready within
                ``start_timeout_s`` (the message carries the end of its log).
        """
        self._check_not_running()
        java = self._find_java()
        self._check_jars()
        controller_port = self._pick_controller_port()
        ports = [("client", self.port), ("controller", controller_port)]
        if self.internal_port is not None:
            ports.append(("internal", self.internal_port))
        if self.metrics_port is not None:
            ports.append(("metrics", self.metrics_port))
        for role, port in ports:
            if port_in_use(port, self.host):
                raise SetupError(
                    f"cannot start Kafka: {role} port {self.host}:{port} is already in use by "
                    "another process; choose another port (--port) or stop what listens there"
                )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config(controller_port)
        if not (self.log_dir / "meta.properties").is_file():
            self._format(java)

        cmd = [
            java,
            f"-Xmx{self.heap}",
            *self.jvm_options,
            *self._metrics_agent(),
            # An OOM broker would otherwise limp on and fail requests at random.
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._log4j_file}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            str(self.jars / "*"),
            "kafka.Kafka",
            str(self.properties_file),
        ]
        log.info("starting Kafka broker on %s (data dir %s)", self.bootstrap, self.data_dir)
        # Its own session: a Ctrl-C meant for our foreground process must not kill a
        # broker that was started to outlive it. broker.out holds only this start.
        self.start_seconds = self._launch(
            cmd, self._out_file, self._ready, self.start_timeout_s, append=False, poll_s=0.1
        )
        log.info("Kafka broker ready on %s after %.1fs", self.bootstrap, self.start_seconds)
        return self.bootstrap

    def status(self) -> BrokerStatus:
        """Whether a broker for this data dir runs, its pid and port, and if it listens."""
        pid = self.running_pid()
        if pid is None:
            return BrokerStatus(running=False, data_dir=self.data_dir, host=self.host)
        port = self._recorded_port()
        return BrokerStatus(
            running=True,
            data_dir=self.data_dir,
            pid=pid,
            host=self.host,
            port=port,
            listening=port is not None and tcp_open(self.host, port),
        )

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the broker log, and of the JVM's own output if it wrote any."""
        logged = tail(self.log_file, lines)
        parts = [f"--- last lines of {self.log_file} ---", *(logged or ["(empty)"])]
        out = [line for line in tail(self._out_file, _OUT_TAIL_LINES) if line.strip()]
        if out:
            parts += [f"--- last lines of {self._out_file} ---", *out]
        return "\n".join(parts)

    # -- internals -------------------------------------------------------------

    def _find_java(self) -> str:
        if self._java:
            found = shutil.which(self._java)
            if found is None:
                raise SetupError(f"java executable {self._java!r} not found")
            return found
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").is_file():
            return str(Path(home) / "bin" / "java")
        found = shutil.which("java")
        if found is None:
            raise SetupError("Java is not installed: no $JAVA_HOME and no `java` on PATH")
        return found

    def _check_jars(self) -> None:
        names = {p.name for p in self.jars.glob("*.jar")} if self.jars.is_dir() else set()
        if not any(n.startswith("kafka_2.13-") for n in names):
            raise SetupError(f"Kafka broker jars are missing from {self.jars}; run `flinkai setup`")
        # slf4j 1.7 finds no binding in log4j-slf4j2-impl (that one is for slf4j 2):
        # the broker would then run with every log line dropped.
        has_v1_api = any(n.startswith("slf4j-api-1.") for n in names)
        has_v1_binding = any(n.startswith("log4j-slf4j-impl-") for n in names)
        if has_v1_api and not has_v1_binding:
            log.warning(
                "the Kafka jar set in %s has slf4j-api 1.x but no log4j-slf4j-impl binding; "
                "the broker will not write %s",
                self.jars,
                self.log_file.name,
            )

    def _pick_controller_port(self) -> int:
        if self._controller_port is not None:
            return self._controller_port
        # The quorum recorded at format time names the controller endpoint, so an
        # existing data dir keeps its port when it can.
        previous = self._configured_controller_port()
        if previous is not None and not port_in_use(previous, self.host):
            return previous
        return free_port(self.host)

    def _configured_controller_port(self) -> int | None:
        try:
            text = self.properties_file.read_text()
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "controller.quorum.bootstrap.servers":
                with contextlib.suppress(ValueError):
                    return int(value.strip().rpartition(":")[2])
        return None

    def _write_config(self, controller_port: int) -> None:
        host = self.host
        props = {
            "process.roles": "broker,controller",
            "node.id": str(_NODE_ID),
            "listeners": f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": (
                f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{controller_port}"
            ),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            **self._secure_properties(),
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            # One node: internal topics cannot have more than one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Internal topics are created on first use; 50 partitions each (the
            # default) costs seconds on a small machine and buys nothing here.
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
            # Tests start consumer groups constantly; the 3 s default delay is pure wait.
            "group.initial.rebalance.delay.ms": "0",
            # Flink's exactly-once Kafka sink asks for 1 h transactions; the broker's
            # 15 min default would reject them.
            "transaction.max.timeout.ms": "3600000",
            **self.properties,
        }
        if self.secure is not None:
            # The controller listener stays plain; it must still be listed.
            props["listeners"] += f",CONTROLLER://{host}:{controller_port}"
        lines = ["# Generated by flinkai on every start; edits are overwritten."]
        lines += [f"{k}={_escape(v)}" for k, v in props.items()]
        self.properties_file.write_text("\n".join(lines) + "\n")

        log_file = _escape(str(self.log_file))
        self._log4j_file.write_text(
            "\n".join(
                [
                    "status = warn",
                    "name = flinkai-kafka",
                    # Log4j's own shutdown hook would race Kafka's and cut the shutdown
                    # log short; lines are flushed one by one, so nothing is lost without it.
                    "shutdownHook = disable",
                    "appender.file.type = RollingFile",
                    "appender.file.name = FILE",
                    f"appender.file.fileName = {log_file}",
                    f"appender.file.filePattern = {log_file}.%i",
                    "appender.file.layout.type = PatternLayout",
                    "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                    "appender.file.policies.type = Policies",
                    "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
                    "appender.file.policies.size.size = 20MB",
                    "appender.file.strategy.type = DefaultRolloverStrategy",
                    "appender.file.strategy.max = 3",
                    "rootLogger.level = INFO",
                    "rootLogger.appenderRef.file.ref = FILE",
                    # Per-request and per-partition chatter that drowns the useful lines.
                    "logger.request.name = kafka.request.logger",
                    "logger.request.level = WARN",
                    "logger.state.name = state.change.logger",
                    "logger.state.level = WARN",
                    "",
                ]
            )
        )

    def _secure_properties(self) -> dict[str, str]:
        if self.secure is None or self.internal_port is None:
            return {}
        return self.secure.properties(self.host, self.port, self.internal_port)

    def _format(self, java: str) -> None:
        cmd = [
            java,
            "-Xmx256m",
            # A one-shot tool: start-up is all that counts.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self._log4j_file}",
            "-cp",
            str(self.jars / "*"),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            new_cluster_id(),
            "--config",
            str(self.properties_file),
            "--standalone",
            *(self.secure.format_args() if self.secure else []),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as e:
            raise SetupError(f"formatting the Kafka log dir {self.log_dir} timed out") from e
        if proc.returncode != 0:
            output = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_LOG_TAIL_LINES:])
            for password in self.secure.users.values() if self.secure else ():
                output = output.replace(password, "[redacted]")
            raise SetupError(f"formatting the Kafka log dir {self.log_dir} failed:\n{output}")

    def _ready(self) -> bool:
        # A cheap TCP check first: building a Kafka client per poll is not free.
        port = self.internal_port or self.port
        if not tcp_open(self.host, port):
            return False
        try:
            cluster = describe_cluster(f"{self.host}:{port}", timeout_s=2.0)
        except BrokerUnavailableError:
            return False
        # The broker answers before it is unfenced; it lists itself once it is.
        return bool(cluster.get("brokers"))

    def _owns(self, cmdline: list[bytes]) -> bool:
        return b"kafka.Kafka" in cmdline and os.fsencode(str(self.properties_file)) in cmdline
