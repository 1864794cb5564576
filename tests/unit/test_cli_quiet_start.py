"""The CLI starts quietly: no warning from other libraries that says nothing to a user.

PyFlink loads Beam's coders when a job registers a Python function, and Beam then
warns once for every cloud filesystem whose SDK is absent (``Failed to import
GCSFileSystem``). The CLI's logging set-up hides that; these tests import the same
module PyFlink does, in a fresh interpreter, with and without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLINKAI = Path(sys.executable).with_name("flinkai")
# The import that makes Beam try its filesystems: PyFlink's coders, as a job loads them.
BEAM_IMPORT = "import pyflink.fn_execution.coders"


def _stderr(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stderr


def test_plain_logging_shows_beams_filesystem_warning() -> None:
    # The control: without the CLI's set-up the warning fires, so the test below can fail.
    stderr = _stderr(f"import logging; logging.basicConfig(); {BEAM_IMPORT}")
    assert "Failed to import GCSFileSystem" in stderr, stderr


def test_cli_logging_hides_it() -> None:
    stderr = _stderr(
        "from flinkai.cli.main import configure_logging; configure_logging(); "
        f"{BEAM_IMPORT}; import logging; logging.getLogger('flinkai').info('still shown')"
    )
    assert "Failed to import" not in stderr, stderr
    assert "WARNING" not in stderr, stderr
    # The set-up filters other libraries only: the CLI's own messages still show.
    assert "INFO flinkai: still shown" in stderr, stderr


def test_help_prints_nothing_on_stderr() -> None:
    result = subprocess.run(
        [str(FLINKAI), "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    assert "COMMAND" in result.stdout
    assert result.stderr == ""
