"""Harness for fault tests: a streaming embed job, a paced producer, exact output checks.

Everything targets 127.0.0.1 and is bounded in count and time. Only processes this
test process started (its descendants) are ever signalled.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flinkai.kafka.admin import IsolationLevel, Record, consume_all, produce
from flinkai.testing import EmbedJob

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "embed_clicks.sql"

POISON = [b"not json", b'{"user_id": "x"}', b'{"user_id": "x", "click_text": " ", "event_time": 1}']


def event(i: int) -> bytes:
    return json.dumps(
        {
            "user_id": f"e-{i}",
            "click_text": f"event number {i} about topic {i % 7}",
            "event_time": 1764576000000 + i,
        }
    ).encode()


def make_events(n: int, poison_every: int = 100) -> tuple[list[bytes], set[str], int]:
    """n good events with unique ids, plus one poison event per ``poison_every`` (1 %)."""
    events: list[bytes] = []
    poison = 0
    for i in range(n):
        events.append(event(i))
        if (i + 1) % poison_every == 0:
            events.append(POISON[poison % len(POISON)])
            poison += 1
    return events, {f"e-{i}" for i in range(n)}, poison


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live descendant of ``root`` (Linux /proc)."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        cmdlines[int(entry)] = cmd
    out = {}
    for pid in parents:
        p = pid
        while p in parents and p != root:
            p = parents[p]
        if p == root and pid != root:
            out[pid] = cmdlines[pid]
    return out


def kill_python_workers() -> list[int]:
    """SIGKILL this process's Flink Python UDF workers (children of the MiniCluster JVM)."""
    pids = [
        pid
        for pid, cmd in descendants(os.getpid()).items()
        if "pyflink.fn_execution.beam.beam_boot" in cmd
    ]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


@dataclass
class StreamingJob(EmbedJob):
    """The embed job, unbounded, on fresh topics; produce, observe, cancel."""

    script: Path = JOB

    def produce_paced(self, events: list[bytes], per_second: float) -> threading.Thread:
        """Produce in the background in small chunks at about ``per_second``."""
        chunk = max(1, int(per_second / 5))

        def run() -> None:
            for i in range(0, len(events), chunk):
                produce(self.bootstrap, self.topics[0], events[i : i + chunk])
                time.sleep(chunk / per_second)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def outputs(
        self,
        isolation: IsolationLevel = "read_committed",
        expect: int | None = None,
        timeout_s: float = 10.0,
        expect_dlq: int | None = None,
    ) -> tuple[list[Record], list[Record]]:
        """Read the result and dead-letter topics.

        A transaction's commit markers reach each partition separately, so its dead
        letters can become visible after its results: pass ``expect_dlq`` to wait for
        them (up to 60 s) instead of reading whatever was visible at that instant.
        """
        out = consume_all(
            self.bootstrap,
            self.topics[1],
            timeout_s=timeout_s,
            isolation_level=isolation,
            expect=expect,
        )
        dlq = consume_all(
            self.bootstrap,
            self.topics[2],
            timeout_s=10.0 if expect_dlq is None else 60.0,
            isolation_level=isolation,
            expect=expect_dlq,
        )
        return out, dlq

    def warm_up(self, events: list[bytes], n: int = 20, timeout_s: float = 240) -> None:
        """Send the first ``n`` events and wait until they are committed: the job is running."""
        produce(self.bootstrap, self.topics[0], events[:n])
        got = self.wait_for(lambda c: c >= n - 1, timeout_s)
        assert got >= n - 1, f"job committed only {got} of the first {n} events in {timeout_s} s"

    def wait_for(self, predicate: Callable[[int], bool], timeout_s: float) -> int:
        """Poll committed result count until ``predicate(count)`` holds; returns the count."""
        deadline = time.monotonic() + timeout_s
        count = 0
        while time.monotonic() < deadline:
            out, _ = self.outputs(timeout_s=5.0)
            count = len(out)
            if predicate(count):
                return count
            time.sleep(2.0)
        return count


def check_exactly_once(
    out: list[Record], dlq: list[Record], expected_ids: set[str], expected_poison: int
) -> None:
    """Committed output == input: no loss, no duplicates, every poison event dead-lettered."""
    ids = Counter(json.loads(r.value)["user_id"] for r in out)
    duplicates = {k: n for k, n in ids.items() if n > 1}
    missing = expected_ids - set(ids)
    unexpected = set(ids) - expected_ids
    assert not duplicates, f"{len(duplicates)} duplicated ids, e.g. {list(duplicates.items())[:5]}"
    assert not missing, f"{len(missing)} lost ids, e.g. {sorted(missing)[:5]}"
    assert not unexpected, f"unexpected ids {sorted(unexpected)[:5]}"
    reasons = Counter(json.loads(r.value)["reason"] for r in dlq)
    assert sum(reasons.values()) == expected_poison, reasons
    assert set(reasons) <= {"not_json", "missing_field", "empty_text"}, reasons


def loopback_workers_here() -> int:
    """How many Python UDF workers run as threads of this process (PyFlink loopback mode)."""
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    pool = BeamFnLoopbackWorkerPoolServicer._instance
    return int(pool._ref_cnt) if pool is not None else 0


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
