"""Create the embedding backend a config names (``embedding.backend``, ``registry``).

With the registry on, the backend follows the registry's current version
(:mod:`.hotswap`); otherwise it is the plain backend of :mod:`.catalog`.
"""

from __future__ import annotations

from flinkai.backends.base import EmbeddingBackend
from flinkai.backends.catalog import BACKENDS, create_plain_backend
from flinkai.config import Config

__all__ = ["BACKENDS", "create_embedding_backend"]


def create_embedding_backend(config: Config) -> EmbeddingBackend:
    """A new, not yet loaded backend for ``config.embedding.backend``.

    Raises:
        ConfigError: The backend name is unknown, or its module or class is missing.
        MissingDependencyError: The backend's optional dependencies are not installed.
    """
    if config.registry.enabled:
        # Serve registry.name's CURRENT version and hot-swap between batches; imported
        # here so a worker without a registry never loads the registry and control code.
        from flinkai.backends.hotswap import hot_swapping_backend

        return hot_swapping_backend(config, config.registry)
    return create_plain_backend(config)
