"""Resolve the JVM artifacts flinkai needs from Maven Central.

Jars are never committed: ``flinkai setup`` runs Maven on the pom shipped in the
package (``flinkai/jvm/pom.xml``) and copies the artifacts into the cache.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from flinkai.errors import SetupError
from flinkai.paths import jars_dir, package_dir
from flinkai.staging import staged_dir

__all__ = [
    "JAR_KINDS",
    "PINNED_SHA256",
    "connector_jars",
    "ensure_jars",
    "find_jars",
    "gateway_jar",
    "resolve_jars",
    "verify_pinned",
]

log = logging.getLogger(__name__)

#: Maven profile per jar set; each lands in ``jars_dir(kind)``.
JAR_KINDS = ("connector", "kafka", "gateway", "jmx")

#: sha256 of jars whose exact bytes are pinned; a resolved jar that differs is refused.
#: flink-sql-gateway: checked against Maven Central's .sha1 on the first fetch.
PINNED_SHA256 = {
    "flink-sql-gateway-2.2.1.jar": "fde5f0f6e868c84de01312a4922404f9571c68a6d879e91fc602bbafa5d735aa",
}


def verify_pinned(jars: list[Path]) -> list[Path]:
    """Check every pinned jar of ``jars`` against :data:`PINNED_SHA256`.

    Raises:
        SetupError: A pinned jar's sha256 differs (a corrupt or substituted download).
    """
    for jar in jars:
        want = PINNED_SHA256.get(jar.name)
        if want is None:
            continue
        got = hashlib.sha256(jar.read_bytes()).hexdigest()
        if got != want:
            raise SetupError(
                f"{jar}: sha256 {got} is not the pinned {want}; "
                "remove it and run `flinkai setup --force`"
            )
    return jars


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
    # Resolve into a sibling staging folder and swap it in, so an interrupted run never
    # leaves a half-filled jar folder that later looks complete.
    with staged_dir(target, prefix=f".{kind}-") as stage:
        with tempfile.TemporaryDirectory(prefix="flinkai-mvn-") as build:
            pom = Path(build) / "pom.xml"
            shutil.copyfile(package_dir() / "jvm" / "pom.xml", pom)
            cmd = [mvn, "-q", "-B", f"-P{kind}", "package", f"-DoutputDir={stage.path}"]
            log.info("resolving %s jars with Maven ...", kind)
            proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise SetupError(f"Maven failed to resolve the {kind} jars:\n{tail}")
        verify_pinned(sorted(stage.path.glob("*.jar")))
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


def gateway_jar() -> Path:
    """``flink-sql-gateway``, checked against its pin; fails clearly when setup has not run."""
    jars = [j for j in find_jars("gateway") if j.name.startswith("flink-sql-gateway")]
    if not jars:
        raise SetupError(
            f"flink-sql-gateway is missing from {jars_dir('gateway')}; run `flinkai setup`"
        )
    return verify_pinned(jars)[0]
