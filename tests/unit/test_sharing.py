"""SharedPool: one object per key per process, disposed by the last holder."""

from __future__ import annotations

import threading

import pytest

from flinkai.sharing import SharedPool


class _Thing:
    def __init__(self) -> None:
        self.disposed = False


def test_one_object_per_key_disposed_by_the_last_release() -> None:
    pool: SharedPool[str, _Thing] = SharedPool(lambda t: setattr(t, "disposed", True))
    made: list[_Thing] = []

    def make() -> _Thing:
        made.append(_Thing())
        return made[-1]

    a, b, c = pool.acquire("k", make), pool.acquire("k", make), pool.acquire("j", make)
    assert a is b and a is not c and len(made) == 2 and pool.refs("k") == 2
    pool.release(a)
    assert not a.disposed and pool.refs("k") == 1
    pool.release(b)
    assert a.disposed and pool.refs("k") == 0 and len(pool) == 1
    with pytest.raises(ValueError, match="not held"):
        pool.release(a)


def test_a_failed_create_holds_nothing_and_concurrent_first_users_create_once() -> None:
    pool: SharedPool[str, _Thing] = SharedPool()

    def broken() -> _Thing:
        raise RuntimeError("load failed")

    with pytest.raises(RuntimeError):
        pool.acquire("k", broken)
    assert len(pool) == 0
    created = []
    start = threading.Barrier(4)

    def slow() -> _Thing:
        created.append(1)
        return _Thing()

    def user() -> None:
        start.wait()
        pool.acquire("k", slow)

    threads = [threading.Thread(target=user) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(created) == 1 and pool.refs("k") == 4
