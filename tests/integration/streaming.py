"""Harness for fault tests: a streaming embed job, a paced producer, exact output checks.

Everything targets 127.0.0.1 and is bounded in count and time. Only processes this
test process started (its descendants) are ever signalled, by PID.

The exactly-once check is exact: after the job's last commit it is cancelled, and
each output topic is read to the end offsets its partitions report then (the last
stable offset under ``read_committed``). The ids found must be the ids sent: no
duplicate, no loss, nothing unexpected (:func:`flinkai.testing.check_exactly_once`).
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

from flinkai.config import Config, load_config
from flinkai.errors import SetupError
from flinkai.kafka.admin import (
    IsolationLevel,
    Record,
    TopicSnapshot,
    consume_all,
    end_offsets,
    produce,
    read_to_end_offsets,
)
from flinkai.local.process import free_port
from flinkai.runtime.cluster import FlinkRest
from flinkai.testing import (
    EmbedJob,
    ExactlyOnceReport,
    check_exactly_once,
    dead_letter_id,
    result_id,
)

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "embed_clicks.sql"

POISON = [b"not json", b'{"user_id": "x"}', b'{"user_id": "x", "click_text": " ", "event_time": 1}']
REASONS = {"not_json", "missing_field", "empty_text"}
#: Final reads: the job has stopped, so only a broken broker makes them slow.
READ_TIMEOUT_S = 60.0


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


def python_workers() -> dict[int, str]:
    """pid -> command line of this process's Flink Python UDF workers (``beam_boot``)."""
    return {
        pid: cmd
        for pid, cmd in descendants(os.getpid()).items()
        if "pyflink.fn_execution.beam.beam_boot" in cmd
    }


def kill_python_workers() -> list[int]:
    """SIGKILL this process's Flink Python UDF workers (children of the MiniCluster JVM)."""
    pids = list(python_workers())
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def with_rest(config: Config | None = None) -> tuple[Config, FlinkRest]:
    """``config`` made to serve the MiniCluster's REST API on a free loopback port.

    Fault tests read the job's restarts, exceptions and checkpoints from it.
    """
    base = config if config is not None else load_config(env={})
    port = free_port()
    flink_conf = {
        **base.runtime.flink_conf,
        "rest.port": str(port),
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
    }
    return base.with_overrides(runtime={"flink_conf": flink_conf}), FlinkRest(f"127.0.0.1:{port}")


def completed_checkpoints(api: FlinkRest, job_id: str) -> int:
    """Completed checkpoints of the job so far; 0 while the API does not answer."""
    try:
        return int((api.checkpoints(job_id).get("counts") or {}).get("completed") or 0)
    except SetupError:
        return 0


def between_checkpoints(api: FlinkRest, job_id: str, interval_s: float) -> float:
    """Wait for the next completed checkpoint, then half an interval; the ack time (epoch s).

    A fault injected then hits the sink with about half an interval of records in an
    open transaction, and with the next commit still seconds away.
    """
    first = api.latest_checkpoint_ack_ms(job_id)
    assert wait_until(
        lambda: api.latest_checkpoint_ack_ms(job_id) > first, timeout_s=4 * interval_s + 30
    ), "no checkpoint completed while streaming"
    ack_s = api.latest_checkpoint_ack_ms(job_id) / 1000
    time.sleep(max(0.0, ack_s + interval_s / 2 - time.time()))
    return ack_s


def open_transaction_records(bootstrap: str, topics: list[str]) -> list[Record]:
    """Records now in open transactions: between a partition's last stable offset and its end."""
    found: list[Record] = []
    for topic in topics:
        stable = end_offsets(bootstrap, topic)
        raw = read_to_end_offsets(bootstrap, topic, "read_uncommitted", timeout_s=10.0)
        found += [r for r in raw.records if r.offset >= stable[r.partition]]
    return found


@dataclass(frozen=True)
class Outcome:
    """What the job committed, read exactly to the end offsets after it stopped.

    Attributes:
        results / dead_letters: The output and dead-letter topics, ``read_committed``.
        raw_results / raw_dead_letters: The same, ``read_uncommitted`` (aborted
            records included).
        result_report / dead_letter_report: Committed ids against those sent.
    """

    results: TopicSnapshot
    dead_letters: TopicSnapshot
    raw_results: TopicSnapshot
    raw_dead_letters: TopicSnapshot
    result_report: ExactlyOnceReport
    dead_letter_report: ExactlyOnceReport

    @property
    def aborted(self) -> int:
        """Records on the log that ``read_committed`` does not return."""
        raw = len(self.raw_results.records) + len(self.raw_dead_letters.records)
        return raw - len(self.results.records) - len(self.dead_letters.records)

    @property
    def replayed_ids(self) -> set[str]:
        """Result ids written more than once (committed or not)."""
        ids = Counter(result_id(r) for r in self.raw_results.records)
        return {k for k, n in ids.items() if n > 1}

    @property
    def unresolved(self) -> dict[str, dict[int, tuple[int, int]]]:
        """Topic -> partition -> (last stable offset, end) where a transaction is still open."""
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for committed, raw in (
            (self.results, self.raw_results),
            (self.dead_letters, self.raw_dead_letters),
        ):
            diff = {
                p: (end, raw.end_offsets[p])
                for p, end in committed.end_offsets.items()
                if end < raw.end_offsets[p]
            }
            if diff:
                out[committed.topic] = diff
        return out

    def summary(self) -> str:
        return (
            f"results: {self.result_report}; dead letters: {self.dead_letter_report}; "
            f"read_uncommitted saw {self.aborted} aborted record(s), "
            f"{len(self.replayed_ids)} id(s) written twice"
        )

    def assert_exactly_once(self) -> None:
        """Every id once, every poison event dead-lettered once with a known reason."""
        self.result_report.assert_ok()
        self.dead_letter_report.assert_ok()
        reasons = Counter(
            json.loads(r.value or b"null")["reason"] for r in self.dead_letters.records
        )
        assert set(reasons) <= REASONS, reasons
        # Nothing left in doubt: no open transaction that could still commit records.
        assert not self.unresolved, (
            f"transactions still open after the job stopped: {self.unresolved}"
        )


@dataclass
class StreamingJob(EmbedJob):
    """The embed job, unbounded, on fresh topics; produce, observe, stop, check exactly."""

    script: Path = JOB

    def produce_paced(
        self,
        events: list[bytes],
        per_second: float,
        lock: threading.Lock | None = None,
        on_clock: bool = False,
    ) -> threading.Thread:
        """Produce in the background in small chunks at about ``per_second``.

        Each chunk is sent holding ``lock`` (if given), so a test that holds it
        pauses the input between two chunks. By default each chunk's send (about
        0.12 s) adds to the sleep, so the stream runs slower than ``per_second``;
        the kill windows of most callers were tuned to that. ``on_clock`` sleeps to
        each chunk's time on the clock instead, so the stream runs at ``per_second``.
        """
        chunk = max(1, int(per_second / 5))
        gate = lock if lock is not None else threading.Lock()

        def run() -> None:
            t0 = time.monotonic()
            for i in range(0, len(events), chunk):
                with gate:
                    produce(self.bootstrap, self.topics[0], events[i : i + chunk])
                if on_clock:
                    time.sleep(max(0.0, t0 + (i + chunk) / per_second - time.monotonic()))
                else:
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
        """Read the result and dead-letter topics (for progress; see :meth:`finish`).

        ``expect`` stops reading at a count, so it can miss a later duplicate: the
        exactly-once verdict comes from :meth:`finish`, which reads to end offsets.
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

    def committed(self) -> tuple[int, int]:
        """(results, dead letters) committed so far, each topic read to its end offsets."""
        out = read_to_end_offsets(self.bootstrap, self.topics[1], timeout_s=30.0)
        dlq = read_to_end_offsets(self.bootstrap, self.topics[2], timeout_s=30.0)
        return len(out.records), len(dlq.records)

    def warm_up(self, events: list[bytes], n: int = 20, timeout_s: float = 240) -> None:
        """Send the first ``n`` events and wait until they are committed: the job is running."""
        produce(self.bootstrap, self.topics[0], events[:n])
        got = self.wait_for(lambda c: c >= n - 1, timeout_s)
        assert got >= n - 1, f"job committed only {got} of the first {n} events in {timeout_s} s"

    def wait_for(self, predicate: Callable[[int], bool], timeout_s: float) -> int:
        """Poll the committed result count until ``predicate(count)`` holds; the count."""
        deadline = time.monotonic() + timeout_s
        count = 0
        while time.monotonic() < deadline:
            count = self.committed()[0]
            if predicate(count):
                return count
            time.sleep(2.0)
        return count

    def poison_ids(self) -> list[str]:
        """Dead-letter ids (see :func:`dead_letter_id`) the input's poison events must get."""
        raw = read_to_end_offsets(self.bootstrap, self.topics[0], timeout_s=READ_TIMEOUT_S)
        poison = set(POISON)
        return [f"{r.topic}:{r.partition}:{r.offset}" for r in raw.records if r.value in poison]

    def finish(self, ids: set[str], api: FlinkRest, timeout_s: float = 240) -> Outcome:
        """Wait for every input's output, stop the job after its last commit, read it exactly.

        Waits (bounded) until the counts are reached, then two more checkpoints, so a
        late duplicate would be committed before the job stops. Then cancels the
        job and reads each output topic to its end offsets, both isolation levels.
        """
        poison = self.poison_ids()
        want = (len(ids), len(poison))
        wait_until(
            lambda: all(n >= w for n, w in zip(self.committed(), want, strict=True)),
            timeout_s,
            interval_s=2.0,
        )
        seen = completed_checkpoints(api, self.job_id)
        interval_s = self.config.runtime.checkpoint_interval_ms / 1000
        wait_until(
            lambda: completed_checkpoints(api, self.job_id) >= seen + 2,
            timeout_s=6 * interval_s + 30,
        )
        self.stop(api)
        return self.outcome(ids, poison)

    def stop(self, api: FlinkRest, timeout_s: float = 60.0) -> None:
        """Cancel the job and wait until it ended (or its MiniCluster, with the API, is gone)."""
        self.cancel()

        def ended() -> bool:
            try:
                return api.job_status(self.job_id) in {"CANCELED", "FAILED", "FINISHED"}
            except SetupError:
                return True  # a per-job MiniCluster shuts down with its job

        assert wait_until(ended, timeout_s), f"job {self.job_id} did not stop in {timeout_s} s"

    def outcome(self, ids: set[str], poison: list[str]) -> Outcome:
        """Each output topic read to its end offsets, compared with what was sent."""

        def read(index: int, isolation: IsolationLevel) -> TopicSnapshot:
            return read_to_end_offsets(
                self.bootstrap, self.topics[index], isolation, timeout_s=READ_TIMEOUT_S
            )

        results, dead = read(1, "read_committed"), read(2, "read_committed")
        return Outcome(
            results=results,
            dead_letters=dead,
            raw_results=read(1, "read_uncommitted"),
            raw_dead_letters=read(2, "read_uncommitted"),
            result_report=check_exactly_once(ids, results.records),
            dead_letter_report=check_exactly_once(poison, dead.records, id_of=dead_letter_id),
        )


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
