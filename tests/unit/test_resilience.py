"""Retry and circuit-breaker rules, driven by a fake clock: nothing here sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from flinkai.backends.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CircuitOpenError,
    InvalidInputError,
    ModelNotFoundError,
)
from flinkai.backends.resilience import CircuitBreaker, Retrier, RetryPolicy
from flinkai.config import TritonConfig
from flinkai.errors import ConfigError


class FakeClock:
    """A monotonic clock that only moves when told to; ``sleep`` advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Script:
    """A callable that raises or returns the scripted outcomes, in order."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def coro(self) -> object:
        return self()


def make(
    clock: FakeClock,
    *,
    retries: int = 3,
    threshold: int = 100,
    reset_s: float = 10.0,
    jitter: float = 0.0,
    rand: Callable[[], float] = lambda: 0.0,
) -> tuple[Retrier, CircuitBreaker]:
    breaker = CircuitBreaker(threshold, reset_s, clock=clock, name="test")
    policy = RetryPolicy(retries, backoff_initial_s=0.1, backoff_max_s=0.5, jitter=jitter)
    return Retrier(
        policy, breaker, sleep=clock.sleep, async_sleep=clock.async_sleep, rand=rand
    ), breaker


# -- RetryPolicy ------------------------------------------------------------------------


def test_backoff_grows_exponentially_and_is_capped() -> None:
    policy = RetryPolicy(5, backoff_initial_s=0.1, backoff_max_s=0.5, jitter=0.0)
    assert [round(policy.delay_s(k, 0.7), 6) for k in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_jitter_only_shortens_and_stays_within_bounds() -> None:
    policy = RetryPolicy(3, backoff_initial_s=1.0, backoff_max_s=8.0, jitter=0.5)
    assert policy.delay_s(2, 0.0) == 4.0
    assert policy.delay_s(2, 0.999999) == pytest.approx(2.0, abs=1e-5)
    assert 2.0 <= policy.delay_s(2, 0.3) <= 4.0


def test_policy_from_triton_config() -> None:
    config = TritonConfig(max_retries=7, backoff_initial_s=0.05, backoff_max_s=1.5)
    policy = RetryPolicy.from_triton_config(config)
    assert (policy.max_retries, policy.backoff_initial_s, policy.backoff_max_s) == (7, 0.05, 1.5)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_retries": -1}, {"backoff_initial_s": -1.0}, {"multiplier": 0.5}, {"jitter": 1.5}],
)
def test_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


# -- Retrier ----------------------------------------------------------------------------


def test_retries_transport_errors_then_succeeds() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock)
    fn = Script(BackendUnavailableError("down"), BackendTimeoutError("slow"), "ok")
    assert retrier.call(fn) == "ok"
    assert fn.calls == 3
    assert clock.sleeps == [0.1, 0.2]
    assert breaker.state == "closed" and breaker.consecutive_failures == 0


def test_gives_up_after_max_retries_with_the_last_error() -> None:
    clock = FakeClock()
    retrier, _ = make(clock, retries=2)
    last = BackendTimeoutError("third")
    fn = Script(BackendTimeoutError("first"), BackendUnavailableError("second"), last)
    with pytest.raises(BackendTimeoutError) as info:
        retrier.call(fn)
    assert info.value is last
    assert fn.calls == 3
    assert clock.sleeps == [0.1, 0.2]


@pytest.mark.parametrize(
    "error", [ModelNotFoundError("no model"), InvalidInputError("bad"), ValueError("bug")]
)
def test_non_retryable_errors_raise_at_once(error: Exception) -> None:
    clock = FakeClock()
    retrier, _ = make(clock)
    fn = Script(error)
    with pytest.raises(type(error)):
        retrier.call(fn)
    assert fn.calls == 1
    assert clock.sleeps == []


def test_on_retry_sees_attempt_error_and_delay() -> None:
    clock = FakeClock()
    seen: list[tuple[int, str, float]] = []
    policy = RetryPolicy(2, backoff_initial_s=0.1, backoff_max_s=1.0, jitter=0.5)
    retrier = Retrier(
        policy,
        sleep=clock.sleep,
        rand=lambda: 0.5,
        on_retry=lambda k, e, d: seen.append((k, str(e), d)),
    )
    retrier.call(Script(BackendUnavailableError("a"), BackendUnavailableError("b"), 1))
    assert [(k, e) for k, e, _ in seen] == [(0, "a"), (1, "b")]
    assert [d for _, _, d in seen] == pytest.approx([0.075, 0.15])
    assert clock.sleeps == pytest.approx([0.075, 0.15])


def test_async_flavour_follows_the_same_rules() -> None:
    clock = FakeClock()
    retrier, _ = make(clock, retries=1)
    ok = Script(BackendUnavailableError("down"), "ok")
    assert asyncio.run(retrier.acall(ok.coro)) == "ok"
    failing = Script(BackendTimeoutError("1"), BackendTimeoutError("2"))
    with pytest.raises(BackendTimeoutError):
        asyncio.run(retrier.acall(failing.coro))
    assert failing.calls == 2
    assert clock.sleeps == [0.1, 0.1]


# -- CircuitBreaker ---------------------------------------------------------------------


def test_breaker_opens_after_threshold_consecutive_failures() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=3)
    for _ in range(2):
        with pytest.raises(BackendUnavailableError):
            retrier.call(Script(BackendUnavailableError("down")))
    assert breaker.state == "closed"
    with pytest.raises(BackendUnavailableError):
        retrier.call(Script(BackendUnavailableError("down")))
    assert breaker.state == "open" and breaker.times_opened == 1

    never = Script("unreachable")
    with pytest.raises(CircuitOpenError) as info:
        retrier.call(never)
    assert never.calls == 0
    assert isinstance(info.value.__cause__, BackendUnavailableError)  # chained to the last failure


def test_success_resets_the_consecutive_count() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=2)
    with pytest.raises(BackendTimeoutError):
        retrier.call(Script(BackendTimeoutError("slow")))
    retrier.call(Script("ok"))
    with pytest.raises(BackendTimeoutError):
        retrier.call(Script(BackendTimeoutError("slow")))
    assert breaker.state == "closed"


def test_server_answers_do_not_count_as_failures() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=2)
    with pytest.raises(BackendTimeoutError):
        retrier.call(Script(BackendTimeoutError("slow")))
    with pytest.raises(ModelNotFoundError):
        retrier.call(Script(ModelNotFoundError("nope")))
    assert breaker.consecutive_failures == 0


def test_retries_stop_when_the_breaker_opens_mid_call() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=10, threshold=3)
    fn = Script(*[BackendUnavailableError(f"down {i}") for i in range(10)])
    with pytest.raises(CircuitOpenError):
        retrier.call(fn)
    assert fn.calls == 3
    assert breaker.state == "open"


def test_half_open_lets_one_trial_through_and_closes_on_success() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=1, reset_s=5.0)
    with pytest.raises(BackendUnavailableError):
        retrier.call(Script(BackendUnavailableError("down")))
    clock.now += 4.9
    with pytest.raises(CircuitOpenError, match=r"next trial in 0\.1s"):
        retrier.call(Script("early"))
    clock.now += 0.1
    assert breaker.state == "half_open"

    breaker.before_call()  # the trial is admitted ...
    with pytest.raises(CircuitOpenError):
        breaker.before_call()  # ... and holds the only slot
    breaker.record_success()
    assert breaker.state == "closed"
    assert retrier.call(Script("ok")) == "ok"


def test_failed_trial_reopens_for_a_full_reset_period() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=1, reset_s=5.0)
    with pytest.raises(BackendUnavailableError):
        retrier.call(Script(BackendUnavailableError("down")))
    clock.now += 5.0
    with pytest.raises(BackendTimeoutError):
        retrier.call(Script(BackendTimeoutError("still down")))
    assert breaker.state == "open" and breaker.times_opened == 2
    clock.now += 4.0
    assert breaker.state == "open"
    clock.now += 1.0
    assert breaker.state == "half_open"


def test_cancelled_trial_gives_its_slot_back() -> None:
    clock = FakeClock()
    retrier, breaker = make(clock, retries=0, threshold=1, reset_s=1.0)
    with pytest.raises(BackendUnavailableError):
        retrier.call(Script(BackendUnavailableError("down")))
    clock.now += 1.0

    async def cancelled() -> object:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(retrier.acall(cancelled))
    breaker.before_call()  # the slot is free again


def test_breaker_from_triton_config_and_validation() -> None:
    breaker = CircuitBreaker.from_triton_config(
        TritonConfig(url="h:1", circuit_failure_threshold=2, circuit_reset_s=3.0)
    )
    assert (breaker.failure_threshold, breaker.reset_s, breaker.name) == (2, 3.0, "h:1")
    with pytest.raises(ConfigError):
        CircuitBreaker(0, 1.0)


def test_backend_errors_share_the_root() -> None:
    # CircuitOpenError is a BackendUnavailableError, so callers that fail over on "unavailable"
    # also handle an open breaker; the retrier itself must not retry it.
    assert issubclass(CircuitOpenError, BackendUnavailableError)
    assert issubclass(BackendUnavailableError, BackendError)
