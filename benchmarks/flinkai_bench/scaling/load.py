"""The scaling run's input: offered at the job's measured drain rate, so the backlog
signal stays above target on a fast machine and a slow one alike.

A fixed refill made the outcome depend on machine speed: a fast job kept up with it
at two TaskManagers (no third), a slow one let it outrun the end of the run. Here,
while loading, the harness keeps the source's visible backlog (``pendingRecords``,
what the HPA's signal is made of) at ``lead_s`` seconds of the job's drain rate, and
offers at most ``step_gain`` times that rate per second. The drain rate is the
committed-offset rate measured at the current parallelism. Whatever the job drains is
offered again, so the offer rate follows the drain rate and the signal stands far
above target at any speed; once the load stops, the backlog is gone in about
``lead_s`` seconds. Offers are bounded per tick, in outstanding (sent, not yet
committed) records, and in total.

Committed offsets move on checkpoints (5 s by default, later under load), so the rate
is taken between commit points, over ``rate_window_s``. The backlog is read from the
source, not from the committed offsets: these lag by a checkpoint or more, and a
controller on them let the job idle at two TaskManagers for 15 s in one attempt. When
the job has nothing waiting, its measured rate is a lower bound, and the target is
``starved_gain`` times larger.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["LoadPlan", "RateFollower"]


@dataclass(frozen=True)
class LoadPlan:
    """How much input the harness keeps waiting.

    Attributes:
        seed: Records offered at the start, before any rate is measured; also the
            least backlog kept (the consumer's prefetch hides about a thousand click
            events from ``pendingRecords`` at 64 KB per partition).
        lead_s: Visible backlog kept at this many seconds of the measured rate.
        rate_window_s: Trailing window of commit points the rate is measured over; the
            rate moves only when the points in it span a third of it or more.
        step_gain: Per second, at most this many times the measured rate is offered.
        starved_gain: The target is multiplied by this while nothing is waiting (two
            readings in a row: the job idled, so its measured rate is a lower bound).
        outstanding_s: Sent but uncommitted records stay under this many times the
            target: a bound for when the backlog reading is wrong.
        min_offer: Smaller top-ups wait for a later tick.
        max_records: Bound on all records offered in the run.
    """

    seed: int = 5000
    lead_s: float = 8.0
    rate_window_s: float = 15.0
    step_gain: float = 2.0
    starved_gain: float = 2.0
    outstanding_s: float = 4.0
    min_offer: int = 200
    max_records: int = 400_000

    def __post_init__(self) -> None:
        if self.seed < 1 or self.min_offer < 1 or self.max_records < self.seed:
            raise ValueError(f"need 1 <= seed <= max_records and min_offer >= 1, got {self}")
        if self.lead_s <= 0 or self.rate_window_s <= 0:
            raise ValueError(f"need lead_s > 0 and rate_window_s > 0, got {self}")
        if min(self.step_gain, self.starved_gain, self.outstanding_s) < 1:
            raise ValueError(f"the gains and outstanding_s must be >= 1, got {self}")


class RateFollower:
    """Records to offer each tick, from what the harness observes of the job."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.rate: float | None = None
        self.stopped = False
        self._points: deque[tuple[float, int]] = deque()
        self._parallelism: int | None = None
        self._baseline = 0
        self._last_offer_t: float | None = None
        self._was_empty = False

    def observe(
        self, t: float, committed: int | None, running: bool, parallelism: int | None
    ) -> None:
        """One tick's committed offsets. Only RUNNING ticks at one parallelism measure.

        At a new parallelism the offsets seen first are a baseline, and the interval up
        to the first commit after it (the restart's warm-up) is left out: the rate is
        taken from the first commit point on, and the last rate stands until a second.
        """
        if committed is None or not running or parallelism is None:
            return
        if parallelism != self._parallelism:
            self._points.clear()
            self._parallelism = parallelism
            self._baseline = committed
            return
        if committed == (self._points[-1][1] if self._points else self._baseline):
            return
        self._points.append((t, committed))
        while len(self._points) > 2 and self._points[0][0] < t - self.plan.rate_window_s:
            self._points.popleft()
        (t0, c0), (t1, c1) = self._points[0], self._points[-1]
        # Two commits close together (a late checkpoint, then one on time) say little.
        if t1 - t0 >= self.plan.rate_window_s / 3:
            self.rate = max(0.0, (c1 - c0) / (t1 - t0))

    def _per_s(self) -> float:
        """The drain rate to follow (the seed spread over the lead until measured)."""
        return max(self.rate or 0.0, self.plan.seed / self.plan.lead_s)

    def target(self, starved: bool = False) -> float:
        """Visible backlog wanted now (``starved``: nothing is waiting)."""
        gain = self.plan.starved_gain if starved else 1.0
        return self.plan.lead_s * self._per_s() * gain

    def offer(self, t: float, produced: int, committed: int | None, pending: float | None) -> int:
        """Records to send at ``t`` (0: none).

        Args:
            produced: Records sent so far.
            committed: The job's committed input offsets (None: not read this tick).
            pending: The source's visible backlog (None: no running source).
        """
        if self.stopped:
            return 0
        room = self.plan.max_records - produced
        if produced == 0:
            self._last_offer_t = t
            return min(self.plan.seed, room)
        if pending is None or committed is None:
            return 0  # restarting, or outstanding unknown: the backlog waits
        dt = t - (self._last_offer_t if self._last_offer_t is not None else t)
        self._last_offer_t = t
        outstanding_cap = self.plan.outstanding_s * self.target() - (produced - committed)
        step = self.plan.step_gain * self._per_s() * max(dt, 0.0)
        # Starved: nothing waiting at two readings in a row (the metric reads 0 for a
        # moment when a restarted source starts, before it has looked at the topic).
        starved = pending <= 0 and self._was_empty
        self._was_empty = pending <= 0
        want = min(self.target(starved=starved) - pending, step, outstanding_cap, room)
        return int(want) if want >= self.plan.min_offer else 0

    def stop(self) -> None:
        """Offer nothing from now on: the backlog drains."""
        self.stopped = True
