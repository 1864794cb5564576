"""The embedding backends by config name, and how to build a plain one.

"Plain" means the backend of ``embedding.backend`` itself, never the hot-swapping
wrapper: :mod:`.hotswap` builds each registry version's backend here, and
:mod:`.factory` adds the registry choice on top, so the two never import each other.
Backends are imported on demand, so a worker that uses ONNX never imports torch or
tritonclient.
"""

from __future__ import annotations

import importlib
from typing import Any

from flinkai.backends.base import EmbeddingBackend
from flinkai.config import Config
from flinkai.errors import ConfigError

__all__ = ["BACKENDS", "SECTIONS", "create_plain_backend"]

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


def create_plain_backend(config: Config) -> EmbeddingBackend:
    """A new, not yet loaded ``config.embedding.backend``; ``config.registry`` is ignored.

    Raises:
        ConfigError: The backend name is unknown, or its module or class is missing.
        MissingDependencyError: The backend's optional dependencies are not installed.
    """
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
