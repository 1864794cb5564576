"""Every section of the flinkai configuration, as typed, frozen dataclasses.

This module is the bottom of the package graph: it imports nothing from flinkai but
:mod:`flinkai.errors`, so every other package can take its section from here without
a cycle. Units live in field names (``_ms``, ``_bytes``) so a YAML reader needs no docs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from flinkai.errors import ConfigError

__all__ = [
    "AdaptiveWindowConfig",
    "DriftConfig",
    "EmbeddingConfig",
    "KafkaConfig",
    "KafkaSecurityConfig",
    "LlmConfig",
    "ModelConfig",
    "OnnxConfig",
    "PredictConfig",
    "RagConfig",
    "RegistryConfig",
    "RuntimeConfig",
    "TritonConfig",
]


@dataclass(frozen=True)
class KafkaSecurityConfig:
    """How clients authenticate to Kafka and check its certificate.

    Secrets are never values here, only references: the password comes from the
    environment variable ``password_env`` or the file ``password_file``, read when a
    client connects. The config (and the job parameter that carries it to workers)
    therefore holds names and paths, never the secret itself.

    Attributes:
        protocol: Kafka ``security.protocol`` of the client listener.
        sasl_mechanism: SASL mechanism; required with the ``SASL_*`` protocols.
        username: SASL user name.
        password_env: Environment variable holding the SASL password.
        password_file: File holding the SASL password (one line; it wins over the env var).
        ca_file: PEM CA bundle that signs the broker's certificate; empty trusts the
            system store (kafka-python) or the JVM's (Flink).
        cert_file: PEM client certificate, for brokers that ask for one (mutual TLS).
        key_file: PEM private key (PKCS#8) of ``cert_file``.
        key_password_env: Environment variable holding the password of an encrypted
            ``key_file``; empty for an unencrypted key.
        key_password_file: File holding that password (it wins over the env var).
    """

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = ""
    username: str = ""
    password_env: str = ""
    password_file: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password_env: str = ""
    key_password_file: str = ""

    def __post_init__(self) -> None:
        sasl = self.protocol.startswith("SASL_")
        if sasl and not self.sasl_mechanism:
            raise ConfigError(f"kafka.security.sasl_mechanism is required with {self.protocol}")
        if sasl and not (self.username and (self.password_env or self.password_file)):
            raise ConfigError(
                f"kafka.security with {self.protocol} needs username and "
                "password_env or password_file"
            )
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("kafka.security.cert_file and key_file go together")
        if (self.key_password_env or self.key_password_file) and not self.key_file:
            raise ConfigError("kafka.security.key_password_* needs key_file")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class KafkaConfig:
    """Where the Kafka cluster is, and how the local broker is run."""

    bootstrap_servers: str = "127.0.0.1:9092"
    #: Port of the embedded single-node broker started by ``flinkai kafka start``.
    local_port: int = 9092
    #: Data dir of the embedded broker; empty means ``$FLINKAI_HOME/kafka``.
    local_data_dir: str = ""
    local_start_timeout_s: float = 60.0
    #: Client security (TLS, SASL); applied to every Kafka table and admin client.
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)


@dataclass(frozen=True)
class ModelConfig:
    """Which embedding model artifacts to load (built by ``flinkai model export``)."""

    name: str = "all-MiniLM-L6-v2"
    #: Artifact folder; empty means ``$FLINKAI_HOME/models/<name>``.
    dir: str = ""
    max_seq_length: int = 256
    dim: int = 384


@dataclass(frozen=True)
class OnnxConfig:
    """ONNX Runtime session options."""

    provider: Literal["cpu", "cuda", "tensorrt"] = "cpu"
    #: 0 lets ONNX Runtime pick (one per physical core).
    intra_op_threads: int = 0
    inter_op_threads: int = 1
    #: Let idle pool threads busy-wait for the next run. Off: in a job the model shares
    #: the cores with the JVM, Kafka and the Python glue, and spinning threads take
    #: their time (small batches ran 1.3-1.6x faster with it off next to a busy core).
    allow_spinning: bool = False
    #: Which model file to load from the artifact folder: fp32 or a quantised variant.
    variant: Literal["fp32", "int8", "fp16"] = "fp32"


@dataclass(frozen=True)
class TritonConfig:
    """Connection to a Triton server; the model spec comes from ``ModelConfig``."""

    url: str = "127.0.0.1:8001"
    model_name: str = "all-MiniLM-L6-v2"
    model_version: str = ""
    timeout_s: float = 10.0
    max_retries: int = 3
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 2.0
    circuit_failure_threshold: int = 5
    circuit_reset_s: float = 10.0
    #: Connect over TLS; ``ca_file`` (PEM) verifies the server, empty uses the system store.
    tls: bool = False
    ca_file: str = ""
    #: PEM client certificate and key, for servers that ask for one (mutual TLS).
    cert_file: str = ""
    key_file: str = ""


@dataclass(frozen=True)
class EmbeddingConfig:
    """Behaviour of the ``text_to_vector`` function."""

    backend: Literal["onnx", "triton", "sentence_transformers"] = "onnx"
    #: Texts per model call; sub-batches are formed after sorting by token length.
    batch_size: int = 32
    sort_by_length: bool = True
    #: With sorting, the ONNX backend also cuts a sub-batch early when its padding would
    #: exceed this fraction of its real tokens (null: cut by batch_size only). Matters
    #: for small Arrow batches, i.e. short bundles under a paced stream.
    max_padding: float | None = 0.2
    #: Texts longer than this (UTF-8 bytes) go to the dead-letter topic, never truncated silently.
    max_text_bytes: int = 16384
    #: How the vector leaves the function: ``array`` fills ``embedding`` (ARRAY<FLOAT>,
    #: a JSON array of decimals in the sink); ``f32`` fills ``embedding_f32`` (BYTES: raw
    #: little-endian float32, base64 in a JSON sink). Writing decimals is most of the
    #: JVM's work per event once the model is fast (`flinkai bench ceiling` measures it).
    vector_encoding: Literal["array", "f32"] = "array"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"embedding.batch_size must be >= 1, got {self.batch_size}")
        if self.max_padding is not None and self.max_padding < 0:
            raise ConfigError(f"embedding.max_padding must be >= 0 or null, got {self.max_padding}")


@dataclass(frozen=True)
class RegistryConfig:
    """Where UDFs find published models (``flinkai registry``), and how they hot-swap."""

    #: Serve the model from the registry with hot swap, instead of ``model.dir``.
    enabled: bool = False
    #: Registry root; empty means ``$FLINKAI_HOME/registry``.
    root: str = ""
    #: Registry name of the model; empty means ``model.name``.
    name: str = ""
    #: How often a running UDF stats the model's ``CURRENT`` pointer, between batches.
    poll_interval_s: float = 5.0
    #: How a new version is checked before it serves: sha256 every load, on first load, or sizes.
    verify: Literal["always", "once", "size"] = "once"
    #: Accept a version with another embedding width (the sink's vector column is fixed).
    allow_dim_change: bool = False
    #: Kafka topic of reload messages (``registry publish --notify``), read from
    #: ``kafka.bootstrap_servers``; empty turns the control-topic trigger off.
    control_topic: str = ""


@dataclass(frozen=True)
class RuntimeConfig:
    """Flink execution settings the runner applies before a script runs."""

    parallelism: int = 1
    #: Rows per Arrow batch handed to a pandas UDF. Texts are sorted by length only
    #: within one batch, so a larger batch pads less (`flinkai bench embed` measures
    #: it); the bundle time still flushes small batches at low rates.
    arrow_batch_size: int = 1024
    #: Rows buffered before the JVM flushes a bundle to the Python worker.
    python_bundle_size: int = 1024
    python_bundle_time_ms: int = 200
    #: Checkpoints commit the Kafka sink's transactions: this bounds end-to-end latency
    #: for read_committed consumers. 0 disables checkpointing (and exactly-once).
    checkpoint_interval_ms: int = 5000
    checkpoint_timeout_ms: int = 60000
    #: Restart budget after a failure (fixed-delay strategy).
    restart_attempts: int = 5
    restart_delay_ms: int = 2000
    #: Port of Flink's Prometheus reporter (``/metrics``, every operator metric plus
    #: flinkai's, see flinkai.metrics); 0 leaves it off. On a MiniCluster the port
    #: serves the whole local job; on a cluster its own Flink config decides.
    prometheus_port: int = 0
    #: What a Python function does when a row raises unexpectedly: ``dead_letter``
    #: routes the row to the DLQ as ``internal_error`` and goes on; ``fail`` fails
    #: the task (Flink restarts it, and a poison record fails it again).
    udf_errors: Literal["dead_letter", "fail"] = "dead_letter"
    #: Extra Flink configuration, applied verbatim (``key: value``).
    flink_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictConfig:
    """Which ONNX model ``predict`` runs, and how rows are fed to it.

    Attributes:
        model_path: The ``.onnx`` file (``~`` is expanded). Required.
        input_name: Graph input fed with the ``[batch, feature_count]`` matrix; empty
            means the graph's only input.
        output_name: Graph output returned as ``score``; empty means the first output.
        feature_count: Features every row must have; 0 means the graph input's static
            last dimension (an error if that dimension is symbolic).
        intra_op_threads: ONNX Runtime threads per session; 0 lets it pick one per core.
        model_version: Written next to every score; empty means
            ``<file stem>@<first 12 hex digits of the file's sha256>``.
    """

    model_path: str = ""
    input_name: str = ""
    output_name: str = ""
    feature_count: int = 0
    intra_op_threads: int = 1
    model_version: str = ""


@dataclass(frozen=True)
class AdaptiveWindowConfig:
    """Parameters of the adaptive window length.

    Attributes:
        base_ms: Window length when there is no processing delay.
        delay_divisor: The delay is divided by this before it is added (10 means a
            slope of 0.1: each second of delay adds 100 ms of window).
        min_ms: Lower clamp; also the length used for the window right after drift.
        max_ms: Upper clamp.
    """

    base_ms: int = 5000
    delay_divisor: float = 10.0
    min_ms: int = 1000
    max_ms: int = 60000

    def __post_init__(self) -> None:
        if self.min_ms <= 0:
            raise ConfigError(f"adaptive_window.min_ms must be > 0, got {self.min_ms}")
        if self.max_ms < self.min_ms:
            raise ConfigError(
                f"adaptive_window.max_ms ({self.max_ms}) must be >= min_ms ({self.min_ms})"
            )
        if not self.delay_divisor > 0:  # also rejects NaN
            raise ConfigError(
                f"adaptive_window.delay_divisor must be > 0, got {self.delay_divisor}"
            )


@dataclass(frozen=True)
class DriftConfig:
    """Parameters of :class:`JSDDriftDetector` (see the module docstring for why).

    Attributes:
        period_s: Sampling period in seconds of event time.
        bins: Histogram bins over the cosine-distance range ``[0, 2]``.
        smoothing: Pseudo-count added to every bin before the JSD.
        history: Number of past periods the z-score is taken against; also the
            warm-up length in periods.
        z_threshold: Drift needs a z-score above this.
        min_samples: Windows with fewer events are not tested, and periods with
            fewer events are skipped.
        std_floor: Lower bound of the history's std in the z-score denominator, in
            the units of the z-scored statistic.
        reference_periods: Periods pooled into the reference (1 = previous only).
        normalize: Z-score the sample-size-normalised significance of the JSD
            (True) or the raw JSD (False, the plain method).
        min_significance: Drift also needs the tested statistic's significance
            (a standard-normal deviate under "no change") to reach this. Use
            ``-math.inf`` to disable the gate.
        baseline: Also compare with a frozen baseline (catches gradual drift).
        shift_test: Also test whether the mean distance grew (centroid shift),
            not only the histogram's JSD.
        checks_per_period: Checkpoints per period; above 1 adds early tests.
        baseline_span: Closed periods (the closing one included) pooled when
            testing against the frozen baseline; 1 tests single periods only.
    """

    period_s: float = 30.0
    bins: int = 20
    smoothing: float = 0.01
    history: int = 5
    z_threshold: float = 2.5
    min_samples: int = 10
    std_floor: float = 1.0
    reference_periods: int = 5
    normalize: bool = True
    min_significance: float = 5.0
    baseline: bool = True
    shift_test: bool = True
    checks_per_period: int = 6
    baseline_span: int = 4

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ConfigError(f"drift.period_s must be > 0, got {self.period_s}")
        if self.bins < 2:
            raise ConfigError(f"drift.bins must be >= 2, got {self.bins}")
        if not self.smoothing >= 0:
            raise ConfigError(f"drift.smoothing must be >= 0, got {self.smoothing}")
        if self.history < 2:
            raise ConfigError(f"drift.history must be >= 2, got {self.history}")
        if self.min_samples < 2:
            raise ConfigError(f"drift.min_samples must be >= 2, got {self.min_samples}")
        if not self.std_floor > 0:
            raise ConfigError(f"drift.std_floor must be > 0, got {self.std_floor}")
        if self.reference_periods < 1:
            raise ConfigError(f"drift.reference_periods must be >= 1, got {self.reference_periods}")
        if self.baseline_span < 1:
            raise ConfigError(f"drift.baseline_span must be >= 1, got {self.baseline_span}")
        if self.checks_per_period < 1:
            raise ConfigError(f"drift.checks_per_period must be >= 1, got {self.checks_per_period}")
        if math.isnan(self.z_threshold) or math.isnan(self.min_significance):
            raise ConfigError("drift thresholds must not be NaN")


#: Chroma's rule for collection names: 3-512 characters of [a-zA-Z0-9._-], starting
#: and ending with a letter or digit.
_COLLECTION_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]")


@dataclass(frozen=True)
class RagConfig:
    """The vector index of ``flinkai.rag``: a Chroma server, its collection, chunking.

    Attributes:
        host: Chroma server host (clients and ``flinkai chroma start``).
        port: Chroma server HTTP port.
        collection: Collection of chunks; the versions and tombstones live in
            ``<collection>.versions``. 3-512 characters of ``[a-zA-Z0-9._-]``.
        k: Passages ``retrieve`` returns when the caller gives no ``k``.
        chunk_words: Words per chunk. MiniLM reads 256 word pieces; AG News runs at
            about 1.35 per word, and 0.9% of its 128-word windows exceed 256 (7.2% of
            160-word ones), so 128 keeps nearly every chunk inside the window.
        chunk_overlap_words: Words each chunk repeats from the one before it.
        max_chunks: A document that needs more chunks is rejected, not truncated.
        hnsw_ef_construction: HNSW build-time candidate list (higher: better graph).
        hnsw_ef_search: HNSW query-time candidate list (higher: better recall, slower).
        hnsw_max_neighbors: HNSW links per node (``M``).
        timeout_s: HTTP timeout of each request to the server.
        local_data_dir: Data dir of ``flinkai chroma start``; empty means
            ``$FLINKAI_HOME/chroma``.
        local_start_timeout_s: How long ``flinkai chroma start`` waits for the heartbeat.
        tls: Talk HTTPS to the server (e.g. behind a TLS-terminating ingress).
        ca_file: PEM bundle that signs the server's certificate; empty means the
            system trust store. Only read when ``tls`` is on.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    collection: str = "flinkai-docs"
    k: int = 5
    chunk_words: int = 128
    chunk_overlap_words: int = 24
    max_chunks: int = 256
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 100
    hnsw_max_neighbors: int = 32
    timeout_s: float = 10.0
    local_data_dir: str = ""
    local_start_timeout_s: float = 60.0
    tls: bool = False
    ca_file: str = ""

    def __post_init__(self) -> None:
        if not _COLLECTION_NAME.fullmatch(self.collection):
            raise ConfigError(
                "rag.collection must be 3-512 characters of [a-zA-Z0-9._-] starting and "
                f"ending with a letter or digit, got {self.collection!r}"
            )
        if not 0 < self.port < 65536:
            raise ConfigError(f"rag.port must be in 1..65535, got {self.port}")
        if self.k < 1:
            raise ConfigError(f"rag.k must be >= 1, got {self.k}")
        if self.chunk_words < 1:
            raise ConfigError(f"rag.chunk_words must be >= 1, got {self.chunk_words}")
        if not 0 <= self.chunk_overlap_words < self.chunk_words:
            raise ConfigError(
                "rag.chunk_overlap_words must be >= 0 and < chunk_words "
                f"({self.chunk_words}), got {self.chunk_overlap_words}"
            )
        if self.max_chunks < 1:
            raise ConfigError(f"rag.max_chunks must be >= 1, got {self.max_chunks}")
        for name in ("hnsw_ef_construction", "hnsw_ef_search", "hnsw_max_neighbors"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rag.{name} must be >= 1, got {getattr(self, name)}")
        if not self.timeout_s > 0:
            raise ConfigError(f"rag.timeout_s must be > 0, got {self.timeout_s}")

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the server."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class LlmConfig:
    """The ``llm_complete`` function: which decoder, prompt limits and prefix reuse.

    Attributes:
        model: Decoder artifact name (``flinkai model export-llm`` builds it).
        dir: Artifact folder; empty means ``$FLINKAI_HOME/models/<model>``.
        max_new_tokens: Tokens generated per prompt unless the call's options say less.
        max_prompt_tokens: Longer prompts (after the chat template) go to the
            dead-letter topic as ``prompt_too_long``; never truncated silently.
        max_prompt_bytes: Prompts over this many UTF-8 bytes are refused before
            tokenising (``prompt_too_long``), so a huge record cannot stall a worker.
        block_tokens: Tokens per prefix block; a block is the unit hashed, stored
            and restored (64, as vLLM's default 16 would make 4x the snapshots).
        store: Where prefix blocks live: ``none`` (no reuse), ``memory`` (this
            worker only), ``kafka`` (a compacted topic shared by every worker).
        topic: The Kafka store's topic (on ``kafka.bootstrap_servers``).
        cache_max_bytes: Byte budget of the Kafka store's decoded-snapshot cache.
        cache_ttl_s: Age after which a cached snapshot is fetched again; null: none.
        max_record_bytes: Largest Kafka record the store writes (chunks above it).
        publish: Write new prefix blocks after a prefill (off: read-only worker).
        store_codec: ``zstd`` (with byte shuffle) or ``none`` (raw bytes: the faster
            choice where the network is not the limit, see ``docs/state-store.md``).
        store_checksum: ``sha256`` or ``xxh3_128`` (about 20x faster to verify).
        store_dtype: ``same`` or ``float16``: blocks stored at half precision and
            widened on read (half the bytes; lossy, checked on 20 prompts' greedy tokens).
        max_running: Sequences the scheduler decodes together per worker.
        step_tokens: Tokens per scheduler step: one per running sequence, the rest
            prefill chunks (so a long prompt delays running ones by one chunk at most).
        overlap_prefill: Run prefill chunks on a thread beside the decode steps, so
            running sequences never wait for a prompt's prefill (off: a step runs its
            chunk, then the decode).
        prefill_first_at: With ``overlap_prefill``, once this many prompts wait for
            their prefill, a decode step waits for the prefill in flight: under a backlog
            the batch fills (throughput) before tokens stream evenly; 0: never.
        kv_budget_bytes: KV bytes per worker (padding included); admission waits and
            the lowest priority is preempted to the store at the budget; 0: no budget.
            A prompt whose KV can never fit is dead-lettered (``kv_budget_exceeded``).
        store_thread: Write and look up prefix blocks on a thread beside the decode
            steps, so a store call (a Kafka transaction) never stalls running sequences.
        priority_aging_s: A waiting prompt gains one priority level per this many seconds.
        max_waiting: Prompts a worker holds in state, waiting or running; more are
            dead-lettered as ``queue_full`` (counted), never dropped.
        max_waiting_bytes: The same limit in bytes of prompt text held in state.
        poll_ms: How often a worker checks for finished completions to emit.
        deltas_topic: Kafka topic for token deltas as they are produced (at-least-once;
            empty: off).
        adapters_topic: Kafka topic of LoRA adapter versions, hot-plugged by every worker
            (read_committed; empty: events naming an adapter are dead-lettered). Needs
            a decoder exported with ``--lora-rank`` (``model: <name>-lora-r8``).
        adapter_versions: Versions kept per adapter, for rollback.
        adapters_wait_s: At start, how long a worker waits for the topic's committed
            versions before serving (events for an adapter not loaded yet would be
            dead-lettered as ``unknown_adapter``).
    """

    model: str = "SmolLM2-135M-Instruct"
    dir: str = ""
    max_new_tokens: int = 32
    max_prompt_tokens: int = 2048
    max_prompt_bytes: int = 32768
    block_tokens: int = 64
    store: Literal["none", "memory", "kafka"] = "memory"
    topic: str = "flinkai-kv-snapshots"
    cache_max_bytes: int = 512 * 1024 * 1024
    cache_ttl_s: float | None = 600.0
    max_record_bytes: int = 1_000_000
    publish: bool = True
    store_codec: Literal["zstd", "none"] = "zstd"
    store_checksum: Literal["sha256", "xxh3_128"] = "sha256"
    store_dtype: Literal["same", "float16"] = "same"
    max_running: int = 32
    step_tokens: int = 64
    overlap_prefill: bool = True
    prefill_first_at: int = 5
    kv_budget_bytes: int = 256 * 1024 * 1024
    store_thread: bool = True
    priority_aging_s: float = 10.0
    max_waiting: int = 100_000
    max_waiting_bytes: int = 256 * 1024 * 1024
    poll_ms: int = 20
    deltas_topic: str = ""
    adapters_topic: str = ""
    adapter_versions: int = 4
    adapters_wait_s: float = 30.0

    def __post_init__(self) -> None:
        for name in (
            "max_new_tokens", "max_prompt_tokens", "max_prompt_bytes", "block_tokens",
            "max_running", "step_tokens", "max_waiting", "max_waiting_bytes", "poll_ms",
            "adapter_versions",
        ):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"llm.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("cache_max_bytes", "kv_budget_bytes", "prefill_first_at"):
            if getattr(self, name) < 0:
                raise ConfigError(f"llm.{name} must be >= 0, got {getattr(self, name)}")
        if not self.priority_aging_s > 0:
            raise ConfigError(f"llm.priority_aging_s must be > 0, got {self.priority_aging_s}")
        if self.cache_ttl_s is not None and not self.cache_ttl_s > 0:
            raise ConfigError(f"llm.cache_ttl_s must be > 0 or null, got {self.cache_ttl_s}")
        if self.store == "kafka" and not self.topic:
            raise ConfigError("llm.topic is required with llm.store: kafka")
