"""A rescaling run as a timeline of samples, and the figures read off it.

The harness samples the cluster every tick (:class:`Sample`) and records each
replica change it made (:class:`ScaleEvent`). :func:`reduce_timeline` turns both into
the figures operators ask for: from the signal crossing its target to the new
TaskManager running tasks, until the backlog is back under target, and the rate
before and after. Pure functions: unit tests drive them with made-up timelines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Phase",
    "Sample",
    "ScaleEvent",
    "ScaleFigures",
    "TimelineFigures",
    "phases",
    "rate_series",
    "reduce_timeline",
]


@dataclass(frozen=True)
class Sample:
    """The cluster at one moment (``t`` seconds after the run started).

    Attributes:
        replicas: TaskManagers the harness wants (the Deployment's ``replicas``).
        registered: TaskManagers the REST API lists.
        parallelism: The job's vertex parallelism (max over vertices), None without a job.
        running: The job and every one of its vertices are RUNNING.
        pending: Kafka source ``pendingRecords`` summed over subtasks; None while the
            job has no running source (restarting).
        signal: The HPA's metric total: ``pending / batch_size`` averaged over the
            window (None when the window holds no value).
        proposal: The formula's raw proposal at this tick (None: no decision taken).
        committed: Input offsets the job has committed (on checkpoints), all partitions.
        produced: Input records written so far.
        source_lag: The source lag now: per input partition, the broker's log end offset
            minus the source's position, summed, from Prometheus (None: not read).
    """

    t: float
    replicas: int
    registered: int
    parallelism: int | None
    running: bool
    pending: float | None
    signal: float | None
    proposal: int | None
    committed: int | None
    produced: int
    source_lag: float | None = None


@dataclass(frozen=True)
class ScaleEvent:
    """The harness changed the replica count at ``t``."""

    t: float
    before: int
    after: int

    @property
    def kind(self) -> str:
        return "up" if self.after > self.before else "down"


@dataclass(frozen=True)
class ScaleFigures:
    """One replica change, timed.

    Attributes:
        crossed_t: Start of the unbroken run of decisions, ending at ``decided_t``,
            whose proposal pointed the same way (the signal crossing its target).
        decided_t: When the harness changed the replicas.
        running_t: First sample after it with the job RUNNING at
            ``after x slots`` (None: never within the run).
        cross_to_running_s / decide_to_running_s: The differences (None without
            ``running_t``).
    """

    kind: str
    before: int
    after: int
    crossed_t: float
    decided_t: float
    running_t: float | None
    parallelism_before: int | None
    parallelism_after: int | None
    cross_to_running_s: float | None
    decide_to_running_s: float | None


@dataclass(frozen=True)
class Phase:
    """An unbroken stretch of samples at one parallelism with the job RUNNING, and
    either saturated at every sample or at none.

    ``rate`` is committed input records per second over the stretch (offsets move
    on checkpoints, so short stretches say little); ``saturated`` means input was
    outstanding (sent, not yet committed) at every sample, so the rate is what the job
    did with work waiting (up to one checkpoint interval of idle time at the end).
    """

    parallelism: int
    start_t: float
    end_t: float
    rate: float | None
    saturated: bool


@dataclass(frozen=True)
class TimelineFigures:
    """What a run measured; None where the run did not get that far."""

    scale_events: list[ScaleFigures]
    first_cross_t: float | None
    load_stopped_t: float | None
    under_target_t: float | None
    cross_to_under_s: float | None
    under_before_load_stopped: bool | None
    stop_to_under_s: float | None
    rate_before: float | None
    rate_after: float | None
    parallelism_seen: list[int]
    phases: list[Phase]


def _running_at(samples: Sequence[Sample], after_t: float, parallelism: int) -> Sample | None:
    for s in samples:
        if s.t >= after_t and s.running and s.parallelism == parallelism:
            return s
    return None


def _last_parallelism(samples: Sequence[Sample], before_t: float) -> int | None:
    found = None
    for s in samples:
        if s.t > before_t:
            break
        if s.running and s.parallelism is not None:
            found = s.parallelism
    return found


def _crossed(samples: Sequence[Sample], event: ScaleEvent) -> float:
    """Earliest decision of the unbroken same-direction run that ended in ``event``."""
    up = event.after > event.before
    crossed = event.t
    for s in reversed([s for s in samples if s.t <= event.t]):
        if s.proposal is None:
            continue  # no decision at this tick (no metric while the job restarted)
        if (s.proposal > s.replicas) if up else (s.proposal < s.replicas):
            crossed = s.t
        else:
            break
    return crossed


def phases(samples: Sequence[Sample], min_s: float = 0.0) -> list[Phase]:
    """Unbroken RUNNING stretches at one parallelism and one saturation, with their rate.

    Args:
        min_s: Stretches shorter than this get ``rate=None`` (checkpoint granularity).
    """
    out: list[Phase] = []
    run: list[Sample] = []

    def busy(s: Sample) -> bool:
        # Input outstanding: not all of it committed yet. (pendingRecords reads 0 while
        # the consumer's prefetch still holds records, so it cannot say idle.)
        return s.committed is not None and s.committed < s.produced

    def close() -> None:
        if not run:
            return
        first, last = run[0], run[-1]
        span = last.t - first.t
        rate = None
        counted = [s for s in run if s.committed is not None]
        if span >= min_s and len(counted) >= 2 and counted[-1].t > counted[0].t:
            c0, c1 = counted[0], counted[-1]
            rate = (c1.committed - c0.committed) / (c1.t - c0.t)  # type: ignore[operator]
        saturated = all(busy(s) for s in run)
        out.append(Phase(first.parallelism or 0, first.t, last.t, rate, saturated))

    for s in samples:
        if s.running and s.parallelism is not None:
            if run and (run[-1].parallelism != s.parallelism or busy(run[-1]) != busy(s)):
                close()
                run = []
            run.append(s)
        else:
            close()
            run = []
    close()
    return out


def rate_series(samples: Sequence[Sample], window_s: float) -> list[tuple[float, float]]:
    """(t, committed records/s over the trailing ``window_s``) for each sample."""
    counted = [s for s in samples if s.committed is not None]
    out: list[tuple[float, float]] = []
    j = 0
    for s in counted:
        while counted[j].t < s.t - window_s:
            j += 1
        first = counted[j]
        if s.t > first.t:
            out.append((s.t, (s.committed - first.committed) / (s.t - first.t)))  # type: ignore[operator]
    return out


def reduce_timeline(
    samples: Sequence[Sample],
    events: Sequence[ScaleEvent],
    *,
    target: float,
    slots: int = 1,
    load_stopped_t: float | None = None,
    min_phase_s: float = 10.0,
) -> TimelineFigures:
    """The run's figures.

    Args:
        samples / events: The timeline, in time order.
        target: The metric's per-replica target (``signal / replicas`` is compared).
        slots: Slots per TaskManager (reactive mode runs at all slots).
        load_stopped_t: When the harness stopped adding input.
        min_phase_s: Shortest stretch whose rate counts.
    """
    figures: list[ScaleFigures] = []
    for e in events:
        running = _running_at(samples, e.t, e.after * slots)
        crossed = _crossed(samples, e)
        figures.append(
            ScaleFigures(
                kind=e.kind,
                before=e.before,
                after=e.after,
                crossed_t=crossed,
                decided_t=e.t,
                running_t=running.t if running else None,
                parallelism_before=_last_parallelism(samples, e.t),
                parallelism_after=running.parallelism if running else None,
                cross_to_running_s=running.t - crossed if running else None,
                decide_to_running_s=running.t - e.t if running else None,
            )
        )
    ups = [f for f in figures if f.kind == "up"]
    first_cross = ups[0].crossed_t if ups else None
    under_t = None
    top_running = [f.running_t for f in ups if f.running_t is not None]
    if first_cross is not None and top_running and len(top_running) == len(ups):
        # Back under target for good: once the last scale-up runs, the start of the
        # last stretch of samples whose per-replica signal is at or below the target.
        # (A restarted source reads 0 for a moment; that dip is not the drain.)
        for s in samples:
            if s.t < max(top_running) or s.signal is None:
                continue
            if s.signal / s.replicas > target:
                under_t = None
            elif under_t is None:
                under_t = s.t
    spans = phases(samples, min_phase_s)
    saturated = [p for p in spans if p.saturated and p.rate is not None]
    top = max((p.parallelism for p in saturated), default=None)
    before = [p.rate for p in saturated if p.parallelism == slots]
    after_rates = [p.rate for p in saturated if top is not None and p.parallelism == top]
    seen: list[int] = []
    for s in samples:
        if s.running and s.parallelism is not None and (not seen or seen[-1] != s.parallelism):
            seen.append(s.parallelism)
    return TimelineFigures(
        scale_events=figures,
        first_cross_t=first_cross,
        load_stopped_t=load_stopped_t,
        under_target_t=under_t,
        cross_to_under_s=(
            under_t - first_cross if under_t is not None and first_cross is not None else None
        ),
        under_before_load_stopped=(
            under_t <= load_stopped_t
            if under_t is not None and load_stopped_t is not None
            else None
        ),
        stop_to_under_s=(
            under_t - load_stopped_t if under_t is not None and load_stopped_t is not None else None
        ),
        rate_before=before[0] if before else None,
        rate_after=after_rates[-1] if after_rates and top != slots else None,
        parallelism_seen=seen,
        phases=spans,
    )
