"""Peak memory and CPU time of a process tree, read from /proc while a benchmark runs."""

from __future__ import annotations

import os
import threading
import time
from typing import ClassVar

__all__ = ["RssSampler", "process_kind", "tree_usage"]


def process_kind(pid: int) -> str:
    """What a process of a bench run is, from its command line: for CPU by process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" in cmd.split(" ", 1)[0]:
        if "kafka.Kafka" in cmd:
            return "kafka broker"
        return "flink jvm" if "flink" in cmd or "pyflink" in cmd else "other jvm"
    if "tritonserver" in cmd or "triton_python_backend" in cmd:
        return "triton server"
    if "python" in cmd:
        return "python"
    return "other"


class RssSampler:
    """Peak resident memory and CPU time of this process plus all its descendants (/proc).

    ``cpu_series`` holds ``(time.time(), cumulative CPU seconds)`` samples of the whole
    tree, so a variant can tell how much CPU its steady phase used, which stays
    meaningful when other work on the machine slows the wall clock down.
    """

    #: The sampler running in this process, if any: a benchmark child reads its CPU
    #: series to price its steady phase.
    active: ClassVar[RssSampler | None] = None

    def __init__(self, interval_s: float = 0.25) -> None:
        self.peak_bytes = 0
        self.cpu_series: list[tuple[float, float]] = []
        #: ``(time.time(), {process kind: cumulative CPU seconds})``, as ``cpu_series``.
        self.kind_series: list[tuple[float, dict[str, float]]] = []
        self._cpu_ticks: dict[int, int] = {}
        self._kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval_s

    def __enter__(self) -> RssSampler:
        RssSampler.active = self
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        RssSampler.active = None
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        rss, ticks = tree_usage(os.getpid())
        self.peak_bytes = max(self.peak_bytes, rss)
        # A process that exited keeps its last reading (its final ticks are lost).
        self._cpu_ticks.update(ticks)
        hz = os.sysconf("SC_CLK_TCK")
        now = time.time()
        by_kind: dict[str, float] = {}
        for pid, t in self._cpu_ticks.items():
            kind = self._kinds.get(pid) or process_kind(pid)
            # A launcher script execs the JVM under the same pid: keep asking until
            # the command line says what the process is.
            if kind not in ("other", "gone"):
                self._kinds[pid] = kind
            by_kind[kind] = by_kind.get(kind, 0.0) + t / hz
        self.cpu_series.append((now, sum(by_kind.values())))
        self.kind_series.append((now, by_kind))

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20


#: The sampler of the running variant child (set by ``_child``).


def tree_usage(root: int) -> tuple[int, dict[int, int]]:
    """(RSS bytes, {pid: utime + stime ticks}) of ``root`` and all its descendants."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    ticks: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * page
        ticks[pid] = int(fields[11]) + int(fields[12])
    total = 0
    mine: dict[int, int] = {}
    for pid in rss:
        p = pid
        while p in parents and p != root and p > 1:
            p = parents[p]
        if p == root:
            total += rss[pid]
            mine[pid] = ticks[pid]
    return total, mine
