"""Control-topic messages, dispatch, sharing and a dead broker: no broker needed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flinkai.backends.hotswap import HotSwappingBackend, hot_swapping_backend
from flinkai.cli import main
from flinkai.config import Config
from flinkai.local.process import free_port
from flinkai.models.control import (
    ControlMessage,
    ControlMessageError,
    ControlTopic,
    ControlTopicListener,
    live_listeners,
    parse_control_message,
    subscribe,
)
from flinkai.models.registry import ModelNotPublishedError, ModelRegistry, RegistryConfig
from tests.unit.test_hotswap import NAME, TEXTS, Factory, publish


class Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def request_reload(self) -> None:
        self.calls += 1


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.fixture
def dead_control() -> ControlTopic:
    """A control topic on an address where nothing listens."""
    return ControlTopic(f"127.0.0.1:{free_port()}", "model-control")


# -- messages -----------------------------------------------------------------------------


def test_message_round_trip_and_extra_fields() -> None:
    message = ControlMessage("minilm", "c52b5d1e9778", 4)
    assert parse_control_message(message.to_json()) == message
    raw = {**json.loads(message.to_json()), "published_at": "2026-12-02T10:59:21Z"}
    assert parse_control_message(json.dumps(raw).encode()) == message


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "tombstone"),
        (b"reload minilm", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"model": "m", "version": "v", "action": "reload"}', "missing field(s) sequence"),
        (b"{}", "missing field(s) model, version, sequence, action"),
        (b'{"model": "", "version": "v", "sequence": 1, "action": "reload"}', "model must"),
        (b'{"model": "m", "version": 3, "sequence": 1, "action": "reload"}', "version must"),
        (b'{"model": "m", "version": "v", "sequence": "1", "action": "reload"}', "sequence must"),
        (b'{"model": "m", "version": "v", "sequence": true, "action": "reload"}', "sequence must"),
        (b'{"model": "m", "version": "v", "sequence": 1, "action": "delete"}', "unknown action"),
    ],
)
def test_bad_messages_say_why(value: bytes | None, reason: str) -> None:
    with pytest.raises(ControlMessageError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_control_message(value)


def test_dispatch_by_model_and_counting(dead_control: ControlTopic) -> None:
    listener = ControlTopicListener(dead_control)  # thread not started: handle() only
    a1, a2, b = Recorder(), Recorder(), Recorder()
    listener.add("a", a1)
    listener.add("a", a2)
    listener.add("b", b)
    listener.handle(ControlMessage("a", "v2", 2).to_json())
    listener.handle(ControlMessage("other", "v1", 1).to_json())
    listener.handle(b"garbage")
    listener.remove("a", a2)
    listener.handle(ControlMessage("a", "v3", 3).to_json())
    assert (a1.calls, a2.calls, b.calls) == (2, 1, 0)
    stats = listener.stats
    assert (stats.messages, stats.reloads, stats.ignored, stats.bad_messages) == (4, 3, 1, 1)
    assert stats.last_bad is not None and "not JSON" in stats.last_bad


# -- sharing and a broker that is not there ------------------------------------------------


def test_one_listener_per_topic_stopped_by_last_close(dead_control: ControlTopic) -> None:
    first = subscribe(dead_control, "a", Recorder())
    second = subscribe(dead_control, "b", Recorder())
    other = subscribe(ControlTopic(dead_control.bootstrap, "elsewhere"), "a", Recorder())
    try:
        assert first.listener is second.listener
        assert other.listener is not first.listener
        listener = first.listener
        assert listener.alive
        # Nothing listens: the thread keeps retrying, counts it, and stays up.
        assert wait_until(lambda: listener.stats.errors >= 1)
        assert not listener.stats.connected
        first.close()
        first.close()  # idempotent: must not release second's hold
        assert listener.alive
        started = time.monotonic()
        second.close()
        assert not listener.alive
        assert time.monotonic() - started < 3.0
        assert listener not in live_listeners()
        assert other.listener.alive
    finally:
        for s in (first, second, other):
            s.close()
    assert not other.listener.alive


def test_directory_watch_works_while_the_control_broker_is_down(
    tmp_path: Path, dead_control: ControlTopic
) -> None:
    reg = ModelRegistry(tmp_path / "registry")
    v1 = publish(reg, "one")
    factory = Factory()
    backend = HotSwappingBackend(reg, NAME, factory, poll_interval_s=0.0, control=dead_control)
    with backend:
        subscription = backend.control
        assert subscription is not None and subscription.listener.alive
        assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v1}"
        v2 = publish(reg, "two")
        assert backend.infer_batch(TEXTS)[1] == f"{NAME}@{v2}"
    assert backend.control is None
    assert not subscription.listener.alive


def test_failed_load_unsubscribes(tmp_path: Path, dead_control: ControlTopic) -> None:
    reg = ModelRegistry(tmp_path / "registry")  # nothing published
    backend = HotSwappingBackend(reg, NAME, Factory(), control=dead_control)
    with pytest.raises(ModelNotPublishedError):
        backend.load()
    assert backend.control is None
    assert all(listener.control != dead_control for listener in live_listeners())


def test_config_turns_the_control_topic_on(tmp_path: Path) -> None:
    reg = ModelRegistry(tmp_path / "registry")
    publish(reg, "one")
    bootstrap = f"127.0.0.1:{free_port()}"
    config = Config().with_overrides(model={"name": NAME}, kafka={"bootstrap_servers": bootstrap})
    on = hot_swapping_backend(
        config, RegistryConfig(root=str(reg.root), control_topic="ctl"), factory=Factory()
    )
    assert on.control_topic == ControlTopic(bootstrap, "ctl")
    off = hot_swapping_backend(config, RegistryConfig(root=str(reg.root)), factory=Factory())
    assert off.control_topic is None


# -- CLI ----------------------------------------------------------------------------------


def test_cli_notify_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLINKAI_REGISTRY_CONTROL_TOPIC", raising=False)
    monkeypatch.setenv("FLINKAI_CONFIG", str(tmp_path / "empty.yaml"))
    (tmp_path / "empty.yaml").write_text("{}\n")
    root = str(tmp_path / "registry")
    src = tmp_path / "weights.bin"
    src.write_bytes(b"8:one")
    publish_argv = ["registry", "publish", NAME, str(src), "--root", root]

    # No topic anywhere: refused before anything is published.
    assert main.main([*publish_argv, "--notify"]) == 2
    assert "--notify needs a control topic" in capsys.readouterr().err
    assert not (Path(root) / NAME).exists()
    assert main.main([*publish_argv, "--topic", "ctl"]) == 2
    assert "need --notify" in capsys.readouterr().err

    # Broker down: the publish stands, the command says so in one line and fails.
    dead = f"127.0.0.1:{free_port()}"
    notify = ["--notify", "--topic", "ctl", "--bootstrap", dead, "--notify-timeout", "1"]
    started = time.monotonic()
    assert main.main([*publish_argv, "--version", "v1", *notify]) == 1
    out, err = capsys.readouterr()
    assert out.strip() == f"{NAME}@v1"
    error_lines = [line for line in err.splitlines() if line.startswith("flinkai: error:")]
    assert len(error_lines) == 1 and dead in error_lines[0] and "is current" in error_lines[0]
    assert "Traceback" not in err
    assert ModelRegistry(root).current(NAME).version == "v1"
    assert time.monotonic() - started < 10
    assert main.main(["registry", "rollback", NAME, "v1", "--root", root, *notify]) == 1
    assert dead in capsys.readouterr().err
