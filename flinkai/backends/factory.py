"""Create the embedding backend a config names (``embedding.backend``).

Backends are imported on demand, so a worker that uses ONNX never imports torch
or tritonclient.
"""

from __future__ import annotations

import importlib
from typing import Any

from flinkai.backends.base import EmbeddingBackend
from flinkai.config import Config
from flinkai.errors import ConfigError

__all__ = ["BACKENDS", "create_embedding_backend"]

#: ``embedding.backend`` value → (module, class).
BACKENDS: dict[str, tuple[str, str]] = {
    "onnx": ("flinkai.backends.onnx", "OnnxEmbeddingBackend"),
    "sentence_transformers": (
        "flinkai.backends.sentence_transformers",
        "SentenceTransformersBackend",
    ),
    "triton": ("flinkai.backends.triton", "TritonEmbeddingBackend"),
}

#: The config sections each backend is built from: it gets only those, by keyword.
SECTIONS: dict[str, tuple[str, ...]] = {
    "onnx": ("model", "onnx", "embedding"),
    "sentence_transformers": ("model", "embedding"),
    "triton": ("triton", "model", "embedding"),
}


def create_embedding_backend(config: Config) -> EmbeddingBackend:
    """A new, not yet loaded backend for ``config.embedding.backend``.

    Raises:
        ConfigError: The backend name is unknown, or its module or class is missing.
        MissingDependencyError: The backend's optional dependencies are not installed.
    """
    if config.registry.enabled:
        # Serve registry.name's CURRENT version and hot-swap between batches.
        from flinkai.backends.hotswap import hot_swapping_backend

        return hot_swapping_backend(config, config.registry)
    kind = config.embedding.backend
    if kind not in BACKENDS:
        raise ConfigError(f"embedding.backend {kind!r} is not one of {sorted(BACKENDS)}")
    module_name, class_name = BACKENDS[kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:  # the module exists but one of its imports does not
            raise
        raise ConfigError(
            f"embedding.backend {kind!r} is not available: module {module_name} is missing "
            "from this flinkai installation"
        ) from e
    cls: Any = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"embedding.backend {kind!r}: {module_name} has no {class_name}")
    backend = cls(**{section: getattr(config, section) for section in SECTIONS[kind]})
    if not isinstance(backend, EmbeddingBackend):
        raise ConfigError(f"{module_name}.{class_name} is not an EmbeddingBackend")
    return backend
