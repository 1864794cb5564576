"""The SmolLM2 export that the LLM job tests need."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from flinkai.config import Config
    from flinkai.kafka.admin import Record

REPO = Path(__file__).resolve().parents[2]

__all__ = ["require_decoder", "run_bounded_llm_job", "tiny_decoder_dir"]


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


def run_bounded_llm_job(
    config: Config, bootstrap: str, topics: tuple[str, str, str], run_id: str
) -> tuple[list[Record], list[Record]]:
    """Run ``jobs/llm_complete.sql`` over what ``topics[0]`` holds now, to its end.

    Returns:
        The completions and the dead letters, read ``read_committed``.
    """
    from flinkai.kafka.admin import read_to_end_offsets
    from flinkai.runtime.runner import RunOptions, run_script

    source, out, dlq = topics
    variables = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "PROMPTS_TOPIC": source,
        "COMPLETIONS_TOPIC": out,
        "DLQ_TOPIC": dlq,
        "SCAN_BOUNDED_MODE": "latest-offset",
        "GROUP_ID": f"llm-{run_id}",
    }
    run_script(
        REPO / "jobs" / "llm_complete.sql",
        config,
        RunOptions(variables=variables, timeout_s=300),
    )
    return (
        read_to_end_offsets(bootstrap, out, timeout_s=30).records,
        read_to_end_offsets(bootstrap, dlq, timeout_s=30).records,
    )
