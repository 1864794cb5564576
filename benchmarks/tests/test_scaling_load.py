"""The scaling run's rate-following load: no broker, a simulated job draining input."""

from __future__ import annotations

import pytest

from flinkai_bench.scaling.load import LoadPlan, RateFollower


def test_seed_first_then_nothing_without_a_reading() -> None:
    f = RateFollower(LoadPlan(seed=1000, lead_s=10.0, max_records=10_000))
    assert f.offer(0.0, 0, None, None) == 1000
    assert f.offer(1.0, 1000, None, 800.0) == 0  # committed offsets unknown this tick
    assert f.offer(2.0, 1000, 0, None) == 0  # restarting: no source backlog reading
    # No rate yet: the seed spread over the lead (100/s) is followed, at most
    # step_gain x that per second since the last offer, up to the seed waiting.
    assert f.offer(3.0, 1000, 0, 900.0) == 0  # 100 short: under min_offer, waits
    assert f.offer(4.0, 1000, 0, 500.0) == 200  # 500 short, but 2 x 100/s x 1 s
    assert f.offer(14.0, 1200, 0, 0.0) == 1000  # one empty reading: the target
    assert f.offer(24.0, 2200, 1200, 0.0) == 2000  # two in a row: starved_gain x target


def test_rate_between_commit_points_at_one_parallelism() -> None:
    f = RateFollower(LoadPlan(seed=100, lead_s=10.0, rate_window_s=12.0))
    f.observe(0.0, 0, True, 1)  # baseline
    f.observe(1.0, 0, True, 1)  # no new commit point
    f.observe(5.0, 500, True, 1)  # first commit: the warm-up interval is left out
    assert f.rate is None and f.target() == 100
    f.observe(7.0, 9999, False, 1)  # restarting: not a measurement
    f.observe(10.0, 6000, True, 1)
    assert f.rate == pytest.approx(1100.0)
    assert f.target() == pytest.approx(11000.0)


def test_a_new_parallelism_keeps_the_last_rate_until_measured() -> None:
    f = RateFollower(LoadPlan(seed=100))
    f.observe(0.0, 0, True, 1)
    f.observe(5.0, 5000, True, 1)
    f.observe(10.0, 10000, True, 1)
    assert f.rate == pytest.approx(1000.0)
    f.observe(20.0, 12000, True, 2)  # first reading at p=2: a baseline only
    f.observe(25.0, 13000, True, 2)  # the restart's slow first interval: left out
    assert f.rate == pytest.approx(1000.0)
    f.observe(30.0, 23000, True, 2)
    assert f.rate == pytest.approx(2000.0)


def test_commit_points_close_together_do_not_move_the_rate() -> None:
    f = RateFollower(LoadPlan(seed=100, rate_window_s=15.0))
    for t, c in ((0.0, 0), (10.0, 10000), (20.0, 20000)):
        f.observe(t, c, True, 1)
    assert f.rate == pytest.approx(1000.0)
    f.observe(36.0, 30000, True, 1)  # the window holds 20 s and 36 s: 16 s apart
    assert f.rate == pytest.approx(625.0)
    f.observe(38.0, 60000, True, 1)  # 36 s..38 s alone (15,000/s) is too short to count
    assert f.rate == pytest.approx(625.0)
    g = RateFollower(LoadPlan(seed=100, rate_window_s=15.0))
    for t, c in ((0.0, 0), (10.0, 10000), (12.0, 40000)):
        g.observe(t, c, True, 1)
    assert g.rate is None  # 2 s between the only two points


def test_old_commit_points_leave_the_window() -> None:
    f = RateFollower(LoadPlan(seed=100, rate_window_s=12.0))
    for t in range(0, 31, 5):  # 1000/s until t=15, then 3000/s
        committed = 1000 * t if t <= 15 else 15000 + 3000 * (t - 15)
        f.observe(float(t), committed, True, 1)
    assert f.rate == pytest.approx(3000.0)


def simulate(
    capacity: float, plan: LoadPlan, seconds: int, checkpoint_s: int = 5, measure: bool = True
) -> tuple[list[float], int]:
    """A job that drains ``capacity`` records/s from its visible backlog and commits
    every ``checkpoint_s``; the follower reads it and offers once a second. Returns the
    visible backlog after each second's offer, and the records offered in all."""
    f = RateFollower(plan)
    produced = processed = committed = 0
    backlog: list[float] = []
    for t in range(seconds):
        if measure:
            f.observe(float(t), committed, True, 1)
        produced += f.offer(float(t), produced, committed, float(produced - processed))
        backlog.append(produced - processed)
        processed = min(produced, processed + int(capacity))
        if t % checkpoint_s == checkpoint_s - 1:
            committed = processed
    return backlog, produced


@pytest.mark.parametrize("checkpoint_s", [5, 15])
@pytest.mark.parametrize("capacity", [300.0, 1300.0, 5000.0, 20000.0])
def test_the_backlog_follows_the_job_at_any_speed(capacity: float, checkpoint_s: int) -> None:
    plan = LoadPlan(seed=2000, lead_s=8.0, max_records=10_000_000)
    backlog, produced = simulate(capacity, plan, 120, checkpoint_s)
    # Once the rate is measured the job always has work waiting: at least a second's
    # worth, and never less than the seed's share (the HPA signal stays high).
    settled = backlog[60:]
    assert min(settled) >= min(capacity, plan.seed)
    # Bounded: the backlog stays within a few leads, the total near what was drained.
    assert max(settled) <= plan.lead_s * max(capacity, plan.seed / plan.lead_s) * 2.5
    assert produced <= capacity * 120 + 3 * plan.lead_s * capacity + plan.seed


def test_without_the_measured_rate_a_fast_job_idles() -> None:
    # Negative control for the simulation: a follower that never learns the rate keeps
    # only the seed's share waiting, and a fast job drains it every second, which is
    # what made a fixed refill fail on a fast machine.
    backlog, _ = simulate(20000.0, LoadPlan(seed=2000, lead_s=8.0), 60, measure=False)
    assert max(backlog[30:]) <= 4000  # under a fifth of a second of its work


def test_stop_and_the_record_bound() -> None:
    f = RateFollower(LoadPlan(seed=1000, lead_s=10.0, min_offer=50, max_records=1500))
    assert f.offer(0.0, 0, None, None) == 1000
    f.observe(0.0, 0, True, 1)
    f.observe(5.0, 500, True, 1)
    f.observe(10.0, 1500, True, 1)  # 200/s: 2000 waiting wanted
    assert f.offer(10.0, 1000, 1000, 0.0) == 500  # only 500 left under the bound
    assert f.offer(11.0, 1500, 1000, 0.0) == 0
    f.stop()
    assert f.offer(12.0, 1000, 1000, 0.0) == 0


def test_outstanding_bound_when_the_backlog_reads_low() -> None:
    # pendingRecords can read 0 while thousands are prefetched or in flight; the
    # uncommitted records then bound what is offered.
    f = RateFollower(LoadPlan(seed=1000, lead_s=10.0, outstanding_s=2.0))
    f.offer(0.0, 0, None, None)
    assert f.offer(100.0, 2000, 0, 0.0) == 0  # 2000 uncommitted = 2 x the 1000 target


def test_plan_is_checked() -> None:
    with pytest.raises(ValueError, match="seed"):
        LoadPlan(seed=10, max_records=5)
    with pytest.raises(ValueError, match="lead_s"):
        LoadPlan(lead_s=0.0)
    with pytest.raises(ValueError, match="gains"):
        LoadPlan(step_gain=0.5)
