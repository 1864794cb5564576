"""Reload hot-swapping backends when a message arrives on a Kafka control topic.

``flinkai registry publish --notify`` (and ``rollback --notify``) writes one JSON
message to the control topic::

    {"model": "all-MiniLM-L6-v2", "version": "c52b5d1e9778", "sequence": 4, "action": "reload"}

Every worker process runs one :class:`ControlTopicListener` per (bootstrap, topic),
shared by all the hot-swapping backends in it, like ``backends/shared.py`` shares
backends: each backend holds a :class:`ControlSubscription`, and the last one closed
stops the listener. The listener reads with no consumer group: it assigns itself
every partition and starts at the messages written since it started (minus a few
seconds of slack for clock skew; a reload is idempotent, so an extra one is
harmless). Older messages do not matter: a backend loads ``CURRENT`` when it starts.
For a message that names a model, the listener calls ``request_reload()`` on every
backend subscribed for that model; the backend then looks at ``CURRENT`` before its
next batch. The message only says *when* to look: ``CURRENT`` stays the one source of
truth, so a lost, repeated or reordered message can delay a swap, never cause a
wrong one.

A message that is not valid JSON or lacks a field is logged and counted, never
raised. While the broker is unreachable the listener retries with a growing
backoff and logs at most one line a minute; the directory watch keeps working.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import kafka.errors as kerrors
from kafka import KafkaConsumer, TopicPartition

from flinkai.models.errors import ControlMessageError
from flinkai.sharing import SharedPool

__all__ = [
    "ControlMessage",
    "ControlStats",
    "ControlSubscription",
    "ControlTopic",
    "ControlTopicListener",
    "Reloadable",
    "live_listeners",
    "parse_control_message",
    "subscribe",
]

log = logging.getLogger(__name__)

#: Actions a control message may carry.
ACTIONS = frozenset({"reload"})
#: Fields every control message must have.
REQUIRED_FIELDS = ("model", "version", "sequence", "action")

#: Bound on one ``poll``: how long ``close`` waits for the thread to notice.
_POLL_TIMEOUT_S = 0.2
#: Messages written this long before the listener started still count (clock skew).
_START_SLACK_S = 5.0
#: Between two reachability checks while connected.
_PROBE_INTERVAL_S = 5.0
#: Reconnect backoff while the broker is unreachable.
_BACKOFF_MIN_S = 0.5
_BACKOFF_MAX_S = 30.0
#: Least time between two log lines about the same outage.
_LOG_EVERY_S = 60.0
#: Version pinned so the consumer does not contact the broker in its constructor
#: (kafka-python then blocks, and leaks its IO thread when the broker is down);
#: each connection still negotiates down to what the broker supports.
_API_VERSION = (3, 0)


@dataclass(frozen=True)
class ControlMessage:
    """One control-topic message.

    Attributes:
        model: Registry name of the model.
        version: The version that became current (informational: ``CURRENT`` decides).
        sequence: Its publish sequence number.
        action: What to do; only ``reload`` is defined.
    """

    model: str
    version: str
    sequence: int
    action: str = "reload"

    def to_json(self) -> bytes:
        """The message as the listener expects it on the topic."""
        return json.dumps(
            {
                "model": self.model,
                "version": self.version,
                "sequence": self.sequence,
                "action": self.action,
            },
            sort_keys=True,
        ).encode()


def parse_control_message(value: bytes | None) -> ControlMessage:
    """Parse one record value; extra fields are ignored.

    Raises:
        ControlMessageError: Not a UTF-8 JSON object, a field missing or of the wrong
            type, or an unknown action.
    """
    if value is None:
        raise ControlMessageError("empty record (a tombstone)")
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, ValueError) as e:
        raise ControlMessageError(f"not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ControlMessageError(f"not a JSON object: {type(data).__name__}")
    missing = [k for k in REQUIRED_FIELDS if k not in data]
    if missing:
        raise ControlMessageError(f"missing field(s) {', '.join(missing)}")
    for key in ("model", "version", "action"):
        if not isinstance(data[key], str) or not data[key]:
            raise ControlMessageError(f"{key} must be a non-empty string, got {data[key]!r}")
    sequence = data["sequence"]
    if not isinstance(sequence, int) or isinstance(sequence, bool):
        raise ControlMessageError(f"sequence must be an integer, got {sequence!r}")
    if data["action"] not in ACTIONS:
        raise ControlMessageError(f"unknown action {data['action']!r}")
    return ControlMessage(data["model"], data["version"], sequence, data["action"])


class Reloadable(Protocol):
    """What the listener calls: :meth:`HotSwappingBackend.request_reload`."""

    def request_reload(self) -> None: ...


@dataclass(frozen=True)
class ControlTopic:
    """Where control messages are read from.

    Attributes:
        bootstrap: ``host:port[,host:port...]``.
        topic: The control topic.
    """

    bootstrap: str
    topic: str


@dataclass(frozen=True)
class ControlStats:
    """Counters of one :class:`ControlTopicListener`.

    Attributes:
        messages: Records read.
        reloads: ``request_reload()`` calls made (one per subscribed backend per message).
        ignored: Valid messages for models no backend here serves.
        bad_messages: Records that were not valid control messages.
        last_bad: Why the latest bad record was refused.
        connected: Whether the partitions are assigned and the broker reachable.
        errors: Connection losses and failed attempts.
    """

    messages: int
    reloads: int
    ignored: int
    bad_messages: int
    last_bad: str | None
    connected: bool
    errors: int


def _reachable(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Whether any bootstrap address accepts a TCP connection."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


class ControlTopicListener:
    """A daemon thread that reads a control topic and reloads subscribed backends.

    Use :func:`subscribe` rather than this class: it shares one listener per
    (bootstrap, topic) in the process.

    Args:
        control: The bootstrap and topic.
        poll_timeout_s: Bound on one poll, and so on how long :meth:`close` waits.
    """

    def __init__(self, control: ControlTopic, *, poll_timeout_s: float = _POLL_TIMEOUT_S) -> None:
        self.control = control
        self.poll_timeout_s = poll_timeout_s
        self._targets: dict[str, list[Reloadable]] = {}
        self._lock = threading.Lock()  # guards _targets and the counters
        self._stop = threading.Event()
        self._consumer: Any = None
        self._since_ms = int((time.time() - _START_SLACK_S) * 1000)
        self._positions: dict[Any, int] = {}  # next offset per partition, across reconnects
        self._messages = 0
        self._reloads = 0
        self._ignored = 0
        self._bad = 0
        self._last_bad: str | None = None
        self._connected = False
        self._errors = 0
        self._last_log = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"flinkai-control-{control.topic}", daemon=True
        )

    # -- targets --------------------------------------------------------------------------

    def add(self, model: str, target: Reloadable) -> None:
        with self._lock:
            self._targets.setdefault(model, []).append(target)

    def remove(self, model: str, target: Reloadable) -> None:
        with self._lock:
            targets = self._targets.get(model, [])
            if target in targets:
                targets.remove(target)
            if not targets:
                self._targets.pop(model, None)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; returns within about ``poll_timeout_s`` when it is polling."""
        self._stop.set()
        self._thread.join(self.poll_timeout_s + 1.0)
        consumer = self._consumer
        if self._thread.is_alive() and consumer is not None:
            # Stuck in a blocking metadata call: closing the consumer ends its IO loop,
            # which fails that call.
            self._close_consumer(consumer)
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("control-topic listener for %s did not stop in time", self.control.topic)

    @property
    def stats(self) -> ControlStats:
        with self._lock:
            return ControlStats(
                messages=self._messages,
                reloads=self._reloads,
                ignored=self._ignored,
                bad_messages=self._bad,
                last_bad=self._last_bad,
                connected=self._connected,
                errors=self._errors,
            )

    # -- messages -------------------------------------------------------------------------

    def handle(self, value: bytes | None, where: str = "") -> None:
        """Act on one record value: reload the backends of the model it names."""
        try:
            message = parse_control_message(value)
        except ControlMessageError as e:
            with self._lock:
                self._messages += 1
                self._bad += 1
                self._last_bad = str(e)
            log.warning(
                "ignoring a bad message on control topic %s%s: %s", self.control.topic, where, e
            )
            return
        with self._lock:
            self._messages += 1
            targets = list(self._targets.get(message.model, ()))
            if targets:
                self._reloads += len(targets)
            else:
                self._ignored += 1
        for target in targets:
            target.request_reload()
        if targets:
            log.info(
                "control topic %s: reload %s (announced %s, sequence %d) for %d backend(s)",
                self.control.topic,
                message.model,
                message.version,
                message.sequence,
                len(targets),
            )

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = _BACKOFF_MIN_S
        while not self._stop.is_set():
            if not _reachable(self.control.bootstrap):
                self._trouble(f"cannot connect to Kafka at {self.control.bootstrap}")
            else:
                try:
                    self._consume()
                    backoff = _BACKOFF_MIN_S
                except kerrors.KafkaError as e:
                    self._trouble(f"Kafka error: {type(e).__name__}: {e}")
                # The listener must outlive anything unexpected; the next attempt may work.
                except Exception as e:
                    self._trouble(f"unexpected {type(e).__name__}: {e}")
            self._set_connected(False)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _consume(self) -> None:
        """Read until stopped or the broker goes away."""
        bootstrap = self.control.bootstrap
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="flinkai-control",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            api_version=_API_VERSION,
            request_timeout_ms=5000,
            reconnect_backoff_max_ms=int(_BACKOFF_MAX_S * 1000),
        )
        self._consumer = consumer
        try:
            assigned: list[Any] = []
            next_probe = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if not assigned or now >= next_probe:
                    next_probe = now + _PROBE_INTERVAL_S
                    # kafka-python would retry a lost broker itself, logging every attempt;
                    # dropping the consumer keeps an outage to this loop's quiet backoff.
                    if assigned and not _reachable(bootstrap):
                        self._trouble(f"lost Kafka at {bootstrap}")
                        return
                    assigned = self._assign(consumer, assigned)
                    if not assigned:
                        self._trouble(f"the topic does not exist on {bootstrap} yet")
                        self._stop.wait(1.0)
                        continue
                batch = consumer.poll(timeout_ms=int(self.poll_timeout_s * 1000))
                for tp, records in batch.items():
                    for record in records:
                        self._positions[tp] = record.offset + 1
                        self.handle(
                            record.value, f" (partition {tp.partition}, offset {record.offset})"
                        )
        finally:
            self._consumer = None
            self._close_consumer(consumer)

    def _assign(self, consumer: Any, assigned: list[Any]) -> list[Any]:
        """Assign every partition, new ones starting at the first message since start."""
        ids = consumer.partitions_for_topic(self.control.topic)
        partitions = [TopicPartition(self.control.topic, p) for p in sorted(ids or ())]
        new = [tp for tp in partitions if tp not in assigned]
        if not new:
            return assigned
        # End offsets first: a message written between the two lookups is at or past them.
        ends = consumer.end_offsets(new, timeout_ms=5000)
        since = consumer.offsets_for_times({tp: self._since_ms for tp in new}, timeout_ms=5000)
        consumer.assign(partitions)
        for tp in new:
            found = since.get(tp)
            start = found.offset if found is not None else ends[tp]
            consumer.seek(tp, self._positions.get(tp, start))
        if not self._connected:
            log.info(
                "listening for model reloads on %s at %s (%d partition(s))",
                self.control.topic,
                self.control.bootstrap,
                len(partitions),
            )
        self._set_connected(True)
        return partitions

    def _set_connected(self, connected: bool) -> None:
        with self._lock:
            self._connected = connected
            if connected:
                self._last_log = 0.0

    def _trouble(self, reason: str) -> None:
        """Count a failed attempt; log it at most once a minute."""
        with self._lock:
            self._errors += 1
            errors = self._errors
            now = time.monotonic()
            quiet = self._last_log > 0 and now - self._last_log < _LOG_EVERY_S
            if not quiet:
                self._last_log = now
        if not quiet:
            log.warning(
                "control topic %s: %s; retrying (%d failed attempt(s) so far), "
                "the directory watch still works",
                self.control.topic,
                reason,
                errors,
            )

    @staticmethod
    def _close_consumer(consumer: Any) -> None:
        try:
            consumer.close(timeout_ms=1000)
        # A failing close of a consumer we are done with must not kill the listener.
        except Exception:
            log.debug("closing the control-topic consumer failed", exc_info=True)


# -- one listener per (bootstrap, topic) per process --------------------------------------


def _stop(listener: ControlTopicListener) -> None:
    listener.close()  # the pool calls this outside its lock: it waits for the thread


_listeners: SharedPool[ControlTopic, ControlTopicListener] = SharedPool(_stop, "listener")


def _start(control: ControlTopic) -> ControlTopicListener:
    listener = ControlTopicListener(control)
    listener.start()
    return listener


class ControlSubscription:
    """One backend's hold on a shared listener; :meth:`close` gives it back."""

    def __init__(self, control: ControlTopic, model: str, target: Reloadable) -> None:
        self.control = control
        self.model = model
        self._target = target
        self._closed = False
        self._close_lock = threading.Lock()
        self.listener = _listeners.acquire(control, lambda: _start(control))
        self.listener.add(model, target)

    def close(self) -> None:
        """Unsubscribe; the last subscription stops the listener thread. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.listener.remove(self.model, self._target)
        _listeners.release(self.listener)


def subscribe(control: ControlTopic, model: str, target: Reloadable) -> ControlSubscription:
    """Call ``target.request_reload()`` whenever a control message names ``model``.

    Starts the process's listener for ``control`` on first use.
    """
    return ControlSubscription(control, model, target)


def live_listeners() -> list[ControlTopicListener]:
    """The listeners running in this process (for tests and diagnostics)."""
    return _listeners.values()
