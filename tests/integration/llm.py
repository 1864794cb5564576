"""The SmolLM2 export that the LLM job tests need."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["require_decoder", "tiny_decoder_dir"]


def require_decoder() -> None:
    """Fail, naming the fix, when the SmolLM2 export is not built (``make demo`` builds it).

    A failure, not a skip, as with the broker fixture: CI builds the export, so a skip
    would hide a broken set-up.
    """
    from flinkai.llm.artifacts import MANIFEST_FILE, default_llm_dir

    if not (default_llm_dir() / MANIFEST_FILE).is_file():
        pytest.fail(
            f"no exported decoder in {default_llm_dir()}: run `flinkai model export-llm`",
            pytrace=False,
        )


def tiny_decoder_dir() -> Path:
    """The tiny random decoder's export folder, built on first use (``make demo`` builds
    the SmolLM2 export whose GGUF it takes the tokenizer from)."""
    from flinkai.models.llm_export import export_tiny_llm

    return export_tiny_llm().decoder_path.parent
