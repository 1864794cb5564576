"""Typed, frozen configuration.

Sources, lowest precedence first: the dataclass defaults, a YAML file
(``configs/default.yaml`` or ``--config``), then ``FLINKAI_<SECTION>_<FIELD>``
environment variables, e.g. ``FLINKAI_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092``.
Units live in field names (``_ms``, ``_bytes``) so a YAML reader needs no docs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from flinkai.drift.detector import DriftConfig
from flinkai.errors import ConfigError
from flinkai.functions.adaptive_window import AdaptiveWindowConfig
from flinkai.functions.predict import PredictConfig

__all__ = [
    "AdaptiveWindowConfig",
    "Config",
    "DriftConfig",
    "EmbeddingConfig",
    "KafkaConfig",
    "ModelConfig",
    "OnnxConfig",
    "PredictConfig",
    "RegistryConfig",
    "RuntimeConfig",
    "TritonConfig",
    "coerce_value",
    "load_config",
]

ENV_PREFIX = "FLINKAI_"


@dataclass(frozen=True)
class KafkaConfig:
    """Where the Kafka cluster is, and how the local broker is run."""

    bootstrap_servers: str = "127.0.0.1:9092"
    #: Port of the embedded single-node broker started by ``flinkai kafka start``.
    local_port: int = 9092
    #: Data dir of the embedded broker; empty means ``$FLINKAI_HOME/kafka``.
    local_data_dir: str = ""
    local_start_timeout_s: float = 60.0


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
    #: within one batch: at 1024 the model sees 1.06x the tokens of a global sort,
    #: at 256 1.22x (benchmarks/README.md); the bundle time still flushes small
    #: batches at low rates.
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
class Config:
    """The whole flinkai configuration."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    onnx: OnnxConfig = field(default_factory=OnnxConfig)
    triton: TritonConfig = field(default_factory=TritonConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    drift: DriftConfig = field(default_factory=DriftConfig)
    adaptive_window: AdaptiveWindowConfig = field(default_factory=AdaptiveWindowConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)
    #: Values for ``${NAME}`` placeholders in SQL scripts.
    vars: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise for shipping to Flink Python workers (as a job parameter)."""
        return json.dumps(self.as_dict(), sort_keys=True)

    def as_dict(self) -> dict[str, Any]:
        """Plain nested dicts (mapping fields are read-only proxies inside the dataclass)."""
        return _plain(self)

    @classmethod
    def from_json(cls, text: str) -> Config:
        """Inverse of :meth:`to_json`."""
        return _build(cls, json.loads(text), "config")

    def with_overrides(self, **sections: Mapping[str, Any]) -> Config:
        """A copy with some fields of some sections replaced, validated like YAML input."""
        raw = self.as_dict()
        for name, values in sections.items():
            if name not in raw:
                raise ConfigError(f"unknown config section {name!r}")
            if isinstance(raw[name], dict):
                raw[name].update(values)
            else:
                raise ConfigError(f"config section {name!r} is not a mapping")
        return _build(Config, raw, "config")


T = TypeVar("T")


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def coerce_value(tp: Any, value: Any, where: str) -> Any:
    """``value`` (from YAML, an env var or a SQL option string) as type ``tp``.

    Raises:
        ConfigError: It does not fit; the message starts with ``where``.
    """
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        # ``X | None``: YAML null, or "null"/"none" from an env var or SQL option
        if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none")):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return coerce_value(inner, value, where)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (Mapping, dict) or tp in (dict,) or origin is typing.Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return types.MappingProxyType({str(k): str(v) for k, v in value.items()})
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return _build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        low = value.strip().lower() if isinstance(value, str) else None
        if low in ("true", "false", "1", "0", "yes", "no"):
            return low in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp in (int, float, str):
        try:
            return tp(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}") from e
    return value


def _build(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    kwargs = {k: coerce_value(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    hints = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        tp = hints[section.name]
        if not dataclasses.is_dataclass(tp):
            continue
        for f in dataclasses.fields(tp):
            key = f"{ENV_PREFIX}{section.name}_{f.name}".upper()
            if key in env:
                out.setdefault(section.name, {})[f.name] = env[key]
    return out


def default_config_path() -> Path | None:
    """``configs/default.yaml`` of the checkout, else the copy shipped in the package."""
    from flinkai.paths import package_dir, repo_root

    root = repo_root()
    for candidate in (
        root / "configs" / "default.yaml" if root else None,
        package_dir() / "configs" / "default.yaml",
    ):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load config from YAML (``path``, ``$FLINKAI_CONFIG`` or the default) plus env overrides."""
    env = os.environ if env is None else env
    chosen = (
        Path(path) if path else (Path(env["FLINKAI_CONFIG"]) if "FLINKAI_CONFIG" in env else None)
    )
    if chosen is None:
        chosen = default_config_path()
    raw: dict[str, Any] = {}
    if chosen is not None:
        if not chosen.is_file():
            raise ConfigError(f"config file not found: {chosen}")
        try:
            loaded = yaml.safe_load(chosen.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{chosen}: invalid YAML: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"{chosen}: top level must be a mapping")
        raw = loaded
    for section, values in _env_overrides(env).items():
        current = raw.get(section) or {}
        if not isinstance(current, dict):
            raise ConfigError(f"{chosen}: section {section!r} must be a mapping")
        raw[section] = {**current, **values}
    return _build(Config, raw, str(chosen) if chosen else "config")
