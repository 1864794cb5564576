"""The whole configuration: loading, env overrides, and the job-parameter round trip.

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

from flinkai.config.sections import (
    AdaptiveWindowConfig,
    DriftConfig,
    EmbeddingConfig,
    KafkaConfig,
    LlmConfig,
    ModelConfig,
    OnnxConfig,
    PredictConfig,
    RagConfig,
    RegistryConfig,
    RuntimeConfig,
    TritonConfig,
)
from flinkai.errors import ConfigError

__all__ = ["ENV_PREFIX", "Config", "coerce_value", "default_config_path", "load_config"]

ENV_PREFIX = "FLINKAI_"


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
    llm: LlmConfig = field(default_factory=LlmConfig)
    rag: RagConfig = field(default_factory=RagConfig)
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


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        tp = hints[section.name]
        if dataclasses.is_dataclass(tp):
            values = _section_overrides(tp, f"{ENV_PREFIX}{section.name}", env)
            if values:
                out[section.name] = values
    return out


def _section_overrides(tp: Any, prefix: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``PREFIX_FIELD`` values; a nested section's fields add their own name, e.g.
    ``FLINKAI_KAFKA_SECURITY_PROTOCOL``."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(tp)
    for f in dataclasses.fields(tp):
        key = f"{prefix}_{f.name}".upper()
        if dataclasses.is_dataclass(hints[f.name]):
            nested = _section_overrides(hints[f.name], key, env)
            if nested:
                out[f.name] = nested
        elif key in env:
            out[f.name] = env[key]
    return out


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        current = out.get(k)
        out[k] = _merge(current, v) if isinstance(v, dict) and isinstance(current, dict) else v
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
        raw[section] = _merge(current, values)
    return _build(Config, raw, str(chosen) if chosen else "config")
