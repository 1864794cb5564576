"""An installed flinkai (the wheel, not the checkout) runs ``jobs/*.sql`` from any folder.

The UDF modules the SQL names ship inside the wheel (``flinkai/udfs``); the runner
ships that folder to the workers when no ``udfs/`` sits beside the job's ``jobs/``.
The check plans the embed job with ``--explain`` from a folder that holds only a copy
of ``jobs/``, with the wheel first on the path: it imports every UDF module and builds
Flink's plan, with no checkout and no broker.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flinkai.runtime.cluster import client_environment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: Port 1 refuses connections: planning needs no broker.
VARS = {
    "KAFKA_BOOTSTRAP": "127.0.0.1:1",
    "CLICKS_TOPIC": "c",
    "EMBEDDINGS_TOPIC": "e",
    "DLQ_TOPIC": "d",
    "SCAN_BOUNDED_MODE": "latest-offset",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: setuptools is in the venv, and nothing is fetched.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(out), str(REPO)],
        check=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("flinkai-*.whl")
    return built


def test_the_wheel_holds_the_udf_modules(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("vectorizer", "events", "text_events", "scoring", "feature_events", "windows"):
        assert f"flinkai/udfs/{module}.py" in names, module
    assert not any(n.startswith("udfs/") for n in names)


def test_installed_flinkai_plans_a_job_from_any_folder(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site),
         str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    shutil.copytree(REPO / "jobs", work / "jobs")
    env = {**client_environment(), "PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-m", "flinkai.cli.main", "run", "jobs/embed_clicks.sql", "--explain",
         *(f"--var={name}={value}" for name, value in VARS.items())],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Python operators: 1" in run.stdout
    # the plan was made by the installed copy, whose UDF folder is inside the wheel
    probe = subprocess.run(
        [sys.executable, "-c", "from flinkai.paths import bundled_udf_dir as d; print(d())"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(probe.stdout.strip()).is_relative_to(site)
