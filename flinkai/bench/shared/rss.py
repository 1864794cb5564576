"""Peak memory and CPU time of a process tree, read from /proc while a benchmark runs."""

from __future__ import annotations

import os
import threading
import time
from typing import ClassVar

__all__ = ["RssSampler", "tree_usage"]


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
        self._cpu_ticks: dict[int, int] = {}
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
        total = sum(self._cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
        self.cpu_series.append((time.time(), total))

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
