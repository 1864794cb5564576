"""The rows of ``flinkai bench llm-serve`` that run in this process, and what they record.

:class:`Row` drives one arrival schedule; :class:`PerRow` (the old SQL function's code,
one prompt at a time) and :class:`Raw` (the scheduler through the operator's service)
run in this process; the job row is in :mod:`flinkai_bench.llm_serve_job`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "BURSTS", "DESIGN_ITL_SLO_MS", "DESIGN_TOK_S", "INSTRUCTION", "Item", "PerRow",
    "RateRun", "Raw", "Record", "Row", "arrivals", "judge", "make_pool",
]  # fmt: skip

#: The design's CPU row (§2.1): 124 tokens/s at ITL p99 42.7 ms.
DESIGN_ITL_SLO_MS = 42.7
DESIGN_TOK_S = 124.0
BURSTS = (64, 256, 1024)
#: Chat-like, decode-heavy requests: an explanation runs to the token budget more often
#: than a one-line summary, which would leave each request mostly prefill.
INSTRUCTION = "Explain this news story to a student, step by step: "


@dataclass(frozen=True)
class Item:
    """One prompt of the pool."""

    key: str
    text: str
    ids: tuple[int, ...]


@dataclass
class Record:
    """One request's timeline (seconds, monotonic) and tokens."""

    key: str
    arrived: float
    first: float | None = None
    #: Job row: when the bench's consumer of the deltas topic received the first delta
    #: (``first`` is that delta's producer timestamp, set when its step ended).
    first_seen: float | None = None
    done: float | None = None
    admitted: float | None = None
    tokens: tuple[int, ...] = ()
    text: str | None = None
    token_times: list[float] = field(default_factory=list)


@dataclass
class RateRun:
    """One row at one arrival rate."""

    row: str
    rate: float
    seconds: float
    sent: int
    finished_in_window: int
    backlog_at_end: int
    tokens_in_window: int
    keeps_up: bool
    records: list[Record]

    @property
    def tok_s(self) -> float:
        return self.tokens_in_window / self.seconds

    def summary(self) -> dict[str, Any]:
        ttft = [1000 * (r.first - r.arrived) for r in self.records if r.first is not None]
        seen = [1000 * (r.first_seen - r.arrived) for r in self.records if r.first_seen is not None]
        e2e = [1000 * (r.done - r.arrived) for r in self.records if r.done is not None]
        queue = [1000 * (r.admitted - r.arrived) for r in self.records if r.admitted is not None]
        itl = [
            1000 * (b - a)
            for r in self.records
            for a, b in zip(r.token_times, r.token_times[1:], strict=False)
        ]
        tpot = [
            1000 * (r.done - r.first) / (len(r.tokens) - 1)
            for r in self.records
            if r.done is not None and r.first is not None and len(r.tokens) > 1
        ]
        return {
            "row": self.row,
            "rate": round(self.rate, 3),
            "seconds": self.seconds,
            "sent": self.sent,
            "finished_in_window": self.finished_in_window,
            "backlog_at_end": self.backlog_at_end,
            "keeps_up": self.keeps_up,
            "tok_s": round(self.tok_s, 1),
            "ttft_ms": _pcts(ttft),
            "ttft_at_consumer_ms": _pcts(seen),
            "tpot_ms": _pcts(tpot),
            "itl_ms": _pcts(itl),
            "e2e_ms": _pcts(e2e),
            "queue_ms": _pcts(queue),
        }


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "n": 0}
    a = np.asarray(values)
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "n": len(values),
    }


def arrivals(rate: float, seconds: float, rng: random.Random) -> list[float]:
    """Poisson arrival offsets in ``[0, seconds)``."""
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(t)


def make_pool(model: Any, n: int, seed: int) -> list[Item]:
    """AG News texts behind the instruction, cut to 60..400 characters."""
    from flinkai.datasets import load_ag_news

    rng = random.Random(seed)
    news = [text for _, text in load_ag_news(limit=4 * n)]
    items = []
    for i in range(n):
        text = INSTRUCTION + rng.choice(news)[: rng.choice([60, 120, 200, 400])]
        items.append(Item(f"q{i}", text, tuple(model.prompt_ids(text))))
    return items


def judge(
    sent: int, done_at: list[float], arrived: list[float], seconds: float
) -> tuple[bool, int]:
    """Whether the queue did not grow over the window, and the backlog at its end.

    The requests in the system, arrived and not done, are counted each second. A
    row that keeps up holds that count steady (about rate x latency, Little's law);
    one that falls behind grows it by its shortfall every second. So a least-squares
    line is fitted to the count over the window's last three quarters (the first is
    the warm-up): over that span it may rise by at most 3 requests plus 5% of those
    that arrived in it (Poisson noise), so a row that completes under 95% of its
    arrivals fails.
    """

    def in_system(t: float) -> int:
        return sum(1 for a in arrived if a <= t) - sum(1 for d in done_at if d <= t)

    backlog = in_system(seconds - 1e-9)
    lo = seconds / 4
    ts = np.arange(lo, seconds, 1.0)
    if len(ts) < 2:
        return backlog <= 3, backlog
    counts = np.array([in_system(float(t)) for t in ts])
    slope = float(np.polyfit(ts, counts, 1)[0])
    came = sum(1 for a in arrived if lo <= a < seconds)
    return slope * (seconds - lo) <= 3 + 0.05 * came, backlog


# -- rows --------------------------------------------------------------------------


class Row:
    """Runs the pool at a rate; subclasses submit and collect."""

    name = ""

    def run(self, pool: Sequence[Item], rate: float, seconds: float, seed: int) -> RateRun:
        rng = random.Random(seed)
        offsets = arrivals(rate, seconds, rng)
        start = time.monotonic()
        records: dict[str, Record] = {}
        self.begin()
        for i, offset in enumerate(offsets):
            item = pool[i % len(pool)]
            key = f"{item.key}-{seed}-{i}"
            delay = start + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            records[key] = Record(key, time.monotonic())
            self.submit(key, item, records[key])
        self.drain(records, timeout_s=max(120.0, 4 * seconds))
        rel = [r.done - start for r in records.values() if r.done is not None]
        arrived = [r.arrived - start for r in records.values()]
        ok, backlog = judge(len(offsets), rel, arrived, seconds)
        tokens = sum(
            sum(1 for t in r.token_times if t - start < seconds) if r.token_times else
            (len(r.tokens) if r.done is not None and r.done - start < seconds else 0)
            for r in records.values()
        )  # fmt: skip
        return RateRun(self.name, rate, seconds, len(offsets),
                       sum(1 for d in rel if d < seconds), backlog, tokens, ok,
                       list(records.values()))  # fmt: skip

    def begin(self) -> None:
        pass

    def submit(self, key: str, item: Item, record: Record) -> None:
        raise NotImplementedError

    def drain(self, records: dict[str, Record], timeout_s: float) -> None:
        raise NotImplementedError


class PerRow(Row):
    """One prompt at a time through LlmCompleteFunction (the old SQL function's code)."""

    name = "per-row"

    def __init__(self, config: Any, model: Any) -> None:
        from flinkai.functions.llm import LlmCompleteFunction, build_store

        self.fn = LlmCompleteFunction(config, model, build_store(config))
        self.model = model
        self.queue: list[tuple[str, Item, Record]] = []
        self.cv = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while True:
            with self.cv:
                while not self.queue and not self.stop:
                    self.cv.wait()
                if self.stop:
                    return
                _key, item, record = self.queue.pop(0)
            record.admitted = time.monotonic()
            done = self.fn.prefix.complete(
                self.model.decoder, list(item.ids),
                max_new_tokens=self.fn.config.llm.max_new_tokens, stop_ids=self.model.stop_ids,
            )  # fmt: skip
            record.first = record.admitted + done.ttft_ms / 1000
            record.tokens = tuple(done.token_ids)
            record.done = time.monotonic()

    def submit(self, key: str, item: Item, record: Record) -> None:
        with self.cv:
            self.queue.append((key, item, record))
            self.cv.notify()

    def drain(self, records: dict[str, Record], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(r.done is None for r in records.values()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        with self.cv:
            self.stop = True
            self.cv.notify()
        self.fn.close()


class Raw(Row):
    """The scheduler in this process, through the service the operator uses."""

    name = "raw"

    def __init__(self, config: Any, model: Any, store: Any = None) -> None:
        from flinkai.functions.llm_service import CompletionService

        self.model = model
        self.times: dict[str, list[float]] = {}
        self.service = CompletionService(config, model, store, on_deltas=self._deltas)
        self.service.start()
        self.records: dict[str, Record] = {}
        self.offset = 0

    def _deltas(self, records: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for d in records:
            r = self.records.get(str(d["id"]))
            if r is not None:
                if r.first is None:
                    r.first = now
                r.token_times.append(now)
                r.tokens = (*r.tokens, *(int(t) for t in d["token_ids"]))
                if d.get("finished"):
                    r.done = now  # when it was produced, not when drain() collected it

    def submit(self, key: str, item: Item, record: Record) -> None:
        from flinkai.functions.llm_service import Pending

        self.records[key] = record
        self.offset += 1
        payload = json.dumps({"id": key, "prompt": item.text}).encode()
        pending = self.service.accept(payload, 0, self.offset)
        assert isinstance(pending, Pending), pending
        assert self.service.hold(pending) is None

    def drain(self, records: dict[str, Record], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(r.text is None for r in records.values()) and time.monotonic() < deadline:
            for o in self.service.finished():
                r = self.records[o.row[0]]
                r.text = o.row[1]
                r.admitted = r.arrived + (o.row[6] or 0) / 1000
            time.sleep(0.01)

    def close(self) -> None:
        self.service.close()
