"""Typed, frozen configuration.

Sources, lowest precedence first: the dataclass defaults, a YAML file
(``configs/default.yaml`` or ``--config``), then ``FLINKAI_<SECTION>_<FIELD>``
environment variables, e.g. ``FLINKAI_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092``.

The package is a leaf of flinkai's import graph: :mod:`.sections` holds every
section and imports only :mod:`flinkai.errors`; :mod:`.core` assembles them.
"""

from flinkai.config.core import ENV_PREFIX, Config, coerce_value, default_config_path, load_config
from flinkai.config.sections import (
    AdaptiveWindowConfig,
    DriftConfig,
    EmbeddingConfig,
    KafkaConfig,
    KafkaSecurityConfig,
    LlmConfig,
    ModelConfig,
    OnnxConfig,
    PredictConfig,
    RagConfig,
    RegistryConfig,
    RuntimeConfig,
    TritonConfig,
)

__all__ = [
    "ENV_PREFIX",
    "AdaptiveWindowConfig",
    "Config",
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
    "coerce_value",
    "default_config_path",
    "load_config",
]
