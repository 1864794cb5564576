"""Resolve the JVM artifacts flinkai needs from Maven Central.

Jars are never committed: ``flinkai setup`` runs Maven on the pom shipped in the
package (``flinkai/jvm/pom.xml``) and copies the artifacts into the cache.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from flinkai.errors import SetupError
from flinkai.paths import jars_dir, package_dir

__all__ = ["JAR_KINDS", "connector_jars", "ensure_jars", "find_jars", "resolve_jars"]

log = logging.getLogger(__name__)

#: Maven profile per jar set; each lands in ``jars_dir(kind)``.
JAR_KINDS = ("connector", "kafka")


def find_jars(kind: str) -> list[Path]:
    """The jars already resolved for ``kind`` (empty when setup has not run)."""
    folder = jars_dir(kind)
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


def resolve_jars(kind: str, force: bool = False) -> list[Path]:
    """Run Maven for one jar set; a no-op when the jars are already there."""
    if kind not in JAR_KINDS:
        raise SetupError(f"unknown jar set {kind!r}; known: {', '.join(JAR_KINDS)}")
    existing = find_jars(kind)
    if existing and not force:
        return existing
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven (mvn) is not on PATH; it is needed once to fetch the jars")
    target = jars_dir(kind)
    # Resolve into a sibling temp folder and swap it in, so an interrupted run never
    # leaves a half-filled jar folder that later looks complete.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=target.parent))
    with tempfile.TemporaryDirectory(prefix="flinkai-mvn-") as build:
        pom = Path(build) / "pom.xml"
        shutil.copyfile(package_dir() / "jvm" / "pom.xml", pom)
        cmd = [mvn, "-q", "-B", f"-P{kind}", "package", f"-DoutputDir={staging}"]
        log.info("resolving %s jars with Maven ...", kind)
        proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise SetupError(f"Maven failed to resolve the {kind} jars:\n{tail}")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return find_jars(kind)


def ensure_jars() -> dict[str, list[Path]]:
    """Resolve every jar set that is missing."""
    return {kind: resolve_jars(kind) for kind in JAR_KINDS}


def connector_jars() -> list[Path]:
    """Jars handed to Flink via ``pipeline.jars``; fails clearly when setup has not run."""
    jars = find_jars("connector")
    if not jars:
        raise SetupError(
            f"the Flink Kafka connector jar is missing from {jars_dir('connector')}; "
            "run `flinkai setup`"
        )
    return jars
