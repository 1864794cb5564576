"""The CLI starts quietly and lean: no stray warnings, and no benchmark code.

PyFlink loads Beam's coders when a job registers a Python function, and Beam then
warns once for every cloud filesystem whose SDK is absent (``Failed to import
GCSFileSystem``). The CLI's logging set-up hides that; these tests import the same
module PyFlink does, in a fresh interpreter, with and without it.

The benchmarks are a separate package (``flinkai-bench``) that only ``flinkai bench``
loads, through an entry point; every other command runs without importing it.
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


#: Runs the CLI's main as the console script does, then lists every module it imported.
RUN_AND_LIST = """
import sys
from flinkai.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:  # --help exits
    pass
sys.stderr.write("MODULES " + " ".join(sys.modules))
"""


def _imported_modules(*argv: str) -> tuple[str, set[str]]:
    """The stdout of ``flinkai ARGV`` and every module in ``sys.modules`` at its end."""
    # sys.modules rather than -X importtime: importlib.import_module, which loads the
    # entry point and the benchmark modules, bypasses the import-time profile
    result = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout, set(result.stderr.rpartition("MODULES ")[2].split())


def test_help_does_not_import_the_benchmarks() -> None:
    stdout, imported = _imported_modules("--help")
    assert "bench" in stdout  # the command is listed, its package is not loaded
    assert "flinkai.cli.main" in imported  # the module list is read right
    assert not {m for m in imported if m.split(".")[0] == "flinkai_bench"}


def test_bench_help_lists_the_benchmarks() -> None:
    stdout, imported = _imported_modules("bench", "--help")
    assert "flinkai_bench.cli" in imported  # the control: here the package is loaded
    listed = {line.split()[0] for line in stdout.splitlines() if line.startswith("    ")}
    assert {"embed", "drift", "anomaly", "rag", "suite"} <= listed, stdout
