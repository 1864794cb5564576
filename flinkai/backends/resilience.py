"""Bounded retries with exponential backoff, and a circuit breaker, for remote backends.

Both take their time sources as arguments (``clock``, ``sleep``, ``rand``) so tests
drive time explicitly and never sleep. The retry loop exists in a blocking
(:meth:`Retrier.call`) and an asyncio (:meth:`Retrier.acall`) flavour with the same
rules:

* Only :class:`~flinkai.backends.errors.BackendTimeoutError` and
  :class:`~flinkai.backends.errors.BackendUnavailableError` are retried; a
  :class:`~flinkai.backends.errors.CircuitOpenError` (a ``BackendUnavailableError``) is not:
  failing fast is the breaker's purpose.
* Attempt ``k`` (0-based) that fails waits ``min(backoff_max_s, backoff_initial_s *
  multiplier**k)``, shrunk by up to ``jitter`` of itself at random, so that many
  clients that failed together do not retry in lockstep.
* Every attempt asks the breaker first; transport failures are reported to it, and so
  is every answer from the server (even an error such as an unknown model): the
  breaker tracks whether the server is reachable, not whether requests are valid.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from flinkai.backends.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CircuitOpenError,
)
from flinkai.config import TritonConfig
from flinkai.errors import ConfigError

__all__ = [
    "RETRYABLE",
    "BreakerState",
    "CircuitBreaker",
    "Retrier",
    "RetryPolicy",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors worth another attempt: the server may be back, or less busy, a moment later.
RETRYABLE: tuple[type[BaseException], ...] = (BackendTimeoutError, BackendUnavailableError)

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait between attempts.

    Attributes:
        max_retries: Attempts after the first; 0 disables retrying.
        backoff_initial_s: Wait after the first failed attempt (before jitter).
        backoff_max_s: Upper bound of any single wait.
        multiplier: Growth factor of the wait per failed attempt.
        jitter: Fraction (0..1) by which a wait is randomly shortened.
    """

    max_retries: int = 3
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_initial_s < 0 or self.backoff_max_s < 0:
            raise ConfigError("backoff times must be >= 0")
        if self.multiplier < 1:
            raise ConfigError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"jitter must be in [0, 1], got {self.jitter}")

    @classmethod
    def from_triton_config(cls, config: TritonConfig) -> RetryPolicy:
        """The policy described by the ``triton`` config section."""
        return cls(
            max_retries=config.max_retries,
            backoff_initial_s=config.backoff_initial_s,
            backoff_max_s=config.backoff_max_s,
        )

    def delay_s(self, attempt: int, rand: float) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based).

        Args:
            attempt: Index of the attempt that just failed.
            rand: A number in ``[0, 1)``; 0 gives the full wait.
        """
        base = min(self.backoff_max_s, self.backoff_initial_s * self.multiplier**attempt)
        return base * (1.0 - self.jitter * rand)


class CircuitBreaker:
    """Fails calls fast after repeated failures, then lets one trial call through.

    States: ``closed`` (calls pass), ``open`` (calls raise :class:`CircuitOpenError` until
    ``reset_s`` has passed since the last failure), ``half_open`` (one trial call
    passes; its success closes the breaker, its failure opens it again). Thread-safe.

    Args:
        failure_threshold: Consecutive failures that open the breaker (>= 1).
        reset_s: Seconds the breaker stays open before a trial call.
        clock: Monotonic time source in seconds.
        name: Used in messages (e.g. the server URL).
    """

    def __init__(
        self,
        failure_threshold: int = 5,
        reset_s: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "backend",
    ) -> None:
        if failure_threshold < 1:
            raise ConfigError(f"circuit failure threshold must be >= 1, got {failure_threshold}")
        if reset_s < 0:
            raise ConfigError(f"circuit reset time must be >= 0, got {reset_s}")
        self.failure_threshold = failure_threshold
        self.reset_s = reset_s
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self._last_error: BaseException | None = None
        #: How many times the breaker went from closed/half-open to open.
        self.times_opened = 0

    @classmethod
    def from_triton_config(
        cls, config: TritonConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> CircuitBreaker:
        """The breaker described by the ``triton`` config section."""
        return cls(
            config.circuit_failure_threshold, config.circuit_reset_s, clock=clock, name=config.url
        )

    @property
    def state(self) -> BreakerState:
        """Current state; an open breaker whose reset time passed reports ``half_open``."""
        with self._lock:
            return self._current_state()

    @property
    def consecutive_failures(self) -> int:
        with self._lock:
            return self._failures

    def _current_state(self) -> BreakerState:
        if self._state == "open" and self._clock() - self._opened_at >= self.reset_s:
            return "half_open"
        return self._state

    def before_call(self) -> None:
        """Ask permission for one call.

        Raises:
            CircuitOpenError: The breaker is open, or half-open with its trial call in flight.
                Chained to the failure that opened it.
        """
        with self._lock:
            state = self._current_state()
            if state == "closed":
                return
            if state == "half_open" and not self._trial_in_flight:
                self._state = "half_open"
                self._trial_in_flight = True
                return
            remaining = max(0.0, self.reset_s - (self._clock() - self._opened_at))
            last = self._last_error
        detail = f"; last error: {last}" if last is not None else ""
        error = CircuitOpenError(
            f"circuit open for {self.name} after {self.failure_threshold} consecutive failures; "
            f"next trial in {remaining:.1f}s{detail}"
        )
        raise error from last

    def record_success(self) -> None:
        """The server answered: close the breaker and reset the failure count."""
        with self._lock:
            self._state = "closed"
            self._failures = 0
            self._trial_in_flight = False
            self._last_error = None

    def record_failure(self, error: BaseException) -> None:
        """A transport failure (timeout, unreachable server): count it, maybe open."""
        with self._lock:
            self._failures += 1
            self._last_error = error
            was_trial = self._trial_in_flight
            self._trial_in_flight = False
            if was_trial or self._failures >= self.failure_threshold:
                if self._state != "open" or was_trial:
                    self.times_opened += 1
                    log.warning("circuit for %s opens: %s", self.name, error)
                self._state = "open"
                self._opened_at = self._clock()

    def release(self) -> None:
        """Give back a half-open trial slot whose call ended without an outcome (cancelled)."""
        with self._lock:
            self._trial_in_flight = False


class Retrier:
    """Runs a call with a :class:`RetryPolicy` and an optional :class:`CircuitBreaker`.

    Args:
        policy: Attempts and waits.
        breaker: Consulted before each attempt and told about each outcome.
        sleep: Blocking sleep used by :meth:`call`.
        async_sleep: Coroutine sleep used by :meth:`acall`.
        rand: Source of jitter in ``[0, 1)``.
        on_retry: Called as ``on_retry(attempt, error, delay_s)`` before each wait.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        breaker: CircuitBreaker | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        on_retry: Callable[[int, BaseException, float], None] | None = None,
    ) -> None:
        self.policy = policy
        self.breaker = breaker
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._rand = rand
        self._on_retry = on_retry

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` until it succeeds, fails with a non-retryable error, or attempts run out.

        Raises:
            CircuitOpenError: The breaker refused an attempt.
            BackendError: The last error of ``fn`` (non-retryable, or retries exhausted).
        """
        attempt = 0
        while True:
            self._admit()
            try:
                result = fn()
            except BaseException as e:
                delay = self._after_failure(attempt, e)
                if delay is None:
                    raise
                self._sleep(delay)
                attempt += 1
                continue
            self._after_success()
            return result

    async def acall(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Asyncio flavour of :meth:`call`: ``fn`` returns a fresh awaitable per attempt."""
        attempt = 0
        while True:
            self._admit()
            try:
                result = await fn()
            except asyncio.CancelledError:
                if self.breaker is not None:
                    self.breaker.release()
                raise
            except BaseException as e:
                delay = self._after_failure(attempt, e)
                if delay is None:
                    raise
                await self._async_sleep(delay)
                attempt += 1
                continue
            self._after_success()
            return result

    # -- shared rules ------------------------------------------------------------------

    def _admit(self) -> None:
        if self.breaker is not None:
            self.breaker.before_call()

    def _after_success(self) -> None:
        if self.breaker is not None:
            self.breaker.record_success()

    def _after_failure(self, attempt: int, error: BaseException) -> float | None:
        """Report ``error``; return the wait before the next attempt, or None to give up."""
        transport = isinstance(error, RETRYABLE) and not isinstance(error, CircuitOpenError)
        if self.breaker is not None:
            if transport:
                self.breaker.record_failure(error)
            elif isinstance(error, BackendError):
                # The server answered (e.g. unknown model): it is reachable.
                self.breaker.record_success()
            else:
                self.breaker.release()
        if not transport or attempt >= self.policy.max_retries:
            return None
        delay = self.policy.delay_s(attempt, self._rand())
        if self._on_retry is not None:
            self._on_retry(attempt, error, delay)
        return delay
