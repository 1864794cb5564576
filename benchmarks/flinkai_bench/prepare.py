"""Build the artefacts a suite entry needs before it runs.

After ``make demo`` a machine has the fp32 embedding model and the LLM export, but
not the int8 variant (``flinkai model quantize``), the anomaly forecasters
(``flinkai model train-anomaly``) nor the risk models of the agents bench
(``flinkai model train-risk``). :func:`prepare` builds the missing ones for the
entries about to run, through the same library calls as those commands, so a first
suite run has no "not exported" or "not trained" row. An artefact that cannot be
built here (no torch, no NAB or risk data) is reported and left to the entry, whose row then
says why in its note.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flinkai.errors import SetupError

__all__ = ["ARTEFACTS", "Artefact", "PrepareReport", "prepare"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Artefact:
    """One generated file set an entry reads.

    Attributes:
        name: What it is, as progress lines name it.
        command: The CLI command that builds it by hand.
        missing: Why it is absent, or None when present.
        blocked: Why it cannot be built on this machine, or None.
        build: Builds it; lines of progress go to the callable.
    """

    name: str
    command: str
    missing: Callable[[], str | None]
    blocked: Callable[[], str | None]
    build: Callable[[Progress], None]


@dataclass(frozen=True)
class PrepareReport:
    """What :func:`prepare` did: names built, and (name, reason) left unbuilt."""

    built: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


def _int8_missing() -> str | None:
    from flinkai.config import ModelConfig
    from flinkai.models.artifacts import load_artifacts
    from flinkai.models.errors import ArtifactError

    try:
        load_artifacts(ModelConfig(), verify_checksums=False).model_file("int8")
    except ArtifactError as e:
        return str(e)
    return None


def _int8_blocked() -> str | None:
    from flinkai.config import ModelConfig
    from flinkai.models.artifacts import load_artifacts
    from flinkai.models.errors import ArtifactError

    try:  # quantising starts from the fp32 export (``make demo`` builds it)
        load_artifacts(ModelConfig(), verify_checksums=False)
    except ArtifactError as e:
        return f"no fp32 export to quantise ({e})"
    return None


def _build_int8(progress: Progress) -> None:
    from flinkai.models.quantize import quantize_model

    result = quantize_model(progress=progress)
    progress(f"int8: mean cosine {result.mean_cosine:.4f} to fp32 -> {result.path}")


def _anomaly_missing(kind: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        from flinkai.anomaly.errors import AnomalyError
        from flinkai.anomaly.spec import anomaly_models_dir, read_meta

        try:
            read_meta(anomaly_models_dir() / kind)
        except AnomalyError as e:
            return str(e)
        return None

    return missing


def _nab_dir() -> Path:
    from flinkai_bench.anomaly import default_data_dir

    return default_data_dir()


def _anomaly_blocked() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "training needs the torch extra"
    if not _nab_dir().is_dir():
        return f"NAB data not found at {_nab_dir()}"
    return None


def _build_anomaly(kind: str) -> Callable[[Progress], None]:
    def build(progress: Progress) -> None:
        from flinkai.anomaly.spec import anomaly_models_dir
        from flinkai.anomaly.train import DEFAULTS, train_model

        spec, options = DEFAULTS[kind]  # type: ignore[index]
        result = train_model(
            spec, _nab_dir(), anomaly_models_dir() / kind, options, progress=progress
        )
        progress(f"{kind}: {result.meta.model_version} in {result.seconds:.0f} s")

    return build


def _risk_missing() -> str | None:
    from flinkai.agents.errors import RiskModelError
    from flinkai.agents.models import RiskModels

    try:
        RiskModels()
    except RiskModelError as e:
        return str(e)
    return None


def _risk_blocked() -> str | None:
    from flinkai.agents.data import default_credit_file, default_fraud_file

    if importlib.util.find_spec("lightgbm") is None:
        return "training needs the risk extra"
    absent = [str(f) for f in (default_fraud_file(), default_credit_file()) if not f.is_file()]
    return f"risk data not found: {', '.join(absent)}" if absent else None


def _build_risk(progress: Progress) -> None:
    from flinkai.agents.train import train_risk_models

    manifest = train_risk_models(progress=progress)
    progress(f"risk models in {manifest['seconds']:.0f} s")


#: Per suite entry, the artefacts it reads that ``make demo`` does not build.
ARTEFACTS: dict[str, tuple[Artefact, ...]] = {
    "embed": (
        Artefact(
            "int8 embedding model",
            "flinkai model quantize",
            _int8_missing,
            _int8_blocked,
            _build_int8,
        ),
    ),
    "anomaly": tuple(
        Artefact(
            f"anomaly model {kind}",
            f"flinkai model train-anomaly --kind {kind}",
            _anomaly_missing(kind),
            _anomaly_blocked,
            _build_anomaly(kind),
        )
        for kind in ("hybrid", "lstm")
    ),
    "agents": (
        Artefact(
            "risk models",
            "flinkai model train-risk",
            _risk_missing,
            _risk_blocked,
            _build_risk,
        ),
    ),
}


def _prefixed(progress: Progress, name: str) -> Progress:
    return lambda line: progress(f"  [{name}] {line}")


def prepare(
    entries: Iterable[str],
    progress: Progress = print,
    artefacts: Mapping[str, Sequence[Artefact]] | None = None,
) -> PrepareReport:
    """Build every missing artefact of ``entries``, in order, with progress.

    A build that raises stops the suite: a half-built artefact must not turn into a
    quiet "n/a" row. An artefact this machine cannot build is skipped with its reason.
    """
    table = ARTEFACTS if artefacts is None else artefacts
    needed: Sequence[Artefact] = [a for e in entries for a in table.get(e, ())]
    built: list[str] = []
    skipped: list[tuple[str, str]] = []
    for artefact in needed:
        why_missing = artefact.missing()
        if why_missing is None:
            continue
        blocked = artefact.blocked()
        if blocked is not None:
            progress(f"prepare: cannot build the {artefact.name} here: {blocked}")
            skipped.append((artefact.name, blocked))
            continue
        progress(f"prepare: building the {artefact.name} ({artefact.command}) ...")
        artefact.build(_prefixed(progress, artefact.name))
        still = artefact.missing()
        if still is not None:
            raise SetupError(f"built the {artefact.name}, but it is still missing: {still}")
        built.append(artefact.name)
    return PrepareReport(tuple(built), tuple(skipped))
