"""Restore ticks: which jobs get them, and the LLM operator's ``buckets`` option."""

from __future__ import annotations

import pytest

from flinkai.errors import ConfigError
from flinkai.operators.keyed import can_restore
from flinkai.operators.llm import parse_options


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str) -> str:
        return self.values.get(key, default)


class _Env:
    def __init__(self, **values: str) -> None:
        self.conf = _Conf({k.replace("_", "."): v for k, v in values.items()})

    def get_config(self) -> _Conf:
        return self.conf


def _env(interval: str | None, kind: str | None, attempts: str | None) -> _Env:
    env = _Env()
    for key, value in (
        ("execution.checkpointing.interval", interval),
        ("restart-strategy.type", kind),
        ("restart-strategy.fixed-delay.attempts", attempts),
    ):
        if value is not None:
            env.conf.values[key] = value
    return env


def test_a_job_that_checkpoints_and_may_restart_can_restore() -> None:
    assert can_restore(_env("5000 ms", "fixed-delay", "3"))
    assert can_restore(_env("2s", None, None))  # Flink's default restart strategy


def test_no_ticks_without_checkpoints_or_restarts() -> None:
    assert not can_restore(_env(None, "fixed-delay", "3"))
    assert not can_restore(_env("0 ms", "fixed-delay", "3"))
    assert not can_restore(_env("5000 ms", "fixed-delay", "0"))  # a bounded scan's run
    assert not can_restore(_env("5000 ms", "none", None))


def test_no_ticks_on_a_bounded_scan() -> None:
    env = _env("5000 ms", "fixed-delay", "3")
    env.conf.values["flinkai.input.bounded"] = "true"
    assert not can_restore(env)


def test_llm_buckets_option() -> None:
    base = {"key": "bucket", "payload": "payload"}
    assert parse_options(base).buckets is None
    assert parse_options({**base, "buckets": "8"}).buckets == 8
    for bad in ("0", "-1", "eight", "5000"):
        with pytest.raises(ConfigError, match="buckets"):
            parse_options({**base, "buckets": bad})
