"""Pinned jars: a resolved jar whose bytes differ from its pin is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from flinkai.errors import SetupError
from flinkai.runtime.jars import JAR_KINDS, PINNED_SHA256, verify_pinned


def test_the_gateway_jar_is_a_jar_set_with_a_pin() -> None:
    assert "gateway" in JAR_KINDS
    assert len(PINNED_SHA256["flink-sql-gateway-2.2.1.jar"]) == 64


def test_a_jar_matching_its_pin_passes_and_unpinned_jars_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "pinned.jar"
    good.write_bytes(b"jar bytes")
    other = tmp_path / "other.jar"
    other.write_bytes(b"anything")
    pins = {"pinned.jar": hashlib.sha256(b"jar bytes").hexdigest()}
    monkeypatch.setattr("flinkai.runtime.jars.PINNED_SHA256", pins)
    assert verify_pinned([good, other]) == [good, other]


def test_a_jar_that_differs_from_its_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "pinned.jar"
    bad.write_bytes(b"substituted")
    monkeypatch.setattr(
        "flinkai.runtime.jars.PINNED_SHA256", {"pinned.jar": hashlib.sha256(b"jar").hexdigest()}
    )
    with pytest.raises(SetupError, match="is not the pinned"):
        verify_pinned([bad])
