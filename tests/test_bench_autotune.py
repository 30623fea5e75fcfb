"""`slash bench autotune`'s judgement of a run, on hand-made timelines: the
best fixed configuration, and how long after each rate step the p99 window
latency is back under the target (the issue's "a step change is followed
within 30 s by p99 back under the target")."""
from slash.bench.autotune import back_under, best_fixed, median_run

PHASES = [(100, 5.0), (1000, 5.0), (100, 10.0)]  # low, high (a step up at 5), low (down at 10)
STARTS = [0.0, 5.0, 10.0]


def timeline(p99_by_t):
    return [{"t": t, "latency_p99_ms": v} for t, v in p99_by_t]


def test_a_step_whose_latency_never_exceeds_the_target_is_back_at_once():
    tl = timeline([(t / 2, 100.0) for t in range(40)])
    assert back_under(tl, PHASES, STARTS, 250.0) == [0.0, 0.0]


def test_a_step_ups_backlog_is_back_under_at_the_first_tick_after_its_last_late_one():
    lat = {6.0: 900.0, 7.0: 2000.0, 8.0: 3000.0, 11.0: 1500.0, 12.5: 400.0}
    tl = timeline([(t / 2, lat.get(t / 2, 80.0)) for t in range(40)])
    # the step up at 5: late until 12.5 (drained in the low phase after it), back at 13.0
    # the step down at 10: its own last late tick 12.5, back at 13.0
    assert back_under(tl, PHASES, STARTS, 250.0) == [8.0, 3.0]


def test_a_latency_still_over_the_target_at_the_horizon_never_came_back():
    tl = timeline([(t / 2, 80.0 if t / 2 < 6 else 5000.0) for t in range(40)])
    assert back_under(tl, PHASES, STARTS, 250.0) == [None, None]


def test_ticks_without_a_latency_are_not_judged():
    tl = timeline([(t / 2, None if t % 2 else (900.0 if t / 2 == 7.0 else 80.0))
                   for t in range(40)])
    assert back_under(tl, PHASES, STARTS, 250.0) == [3.0, 0.0]


def test_the_best_fixed_meets_the_target_with_the_fewest_executors_then_the_lowest_p99():
    fixed = [{"executors": 2, "epoch_ms": 50, "p99_ms": 90.0},
             {"executors": 1, "epoch_ms": 200, "p99_ms": 240.0},
             {"executors": 1, "epoch_ms": 50, "p99_ms": 260.0}]
    assert best_fixed(fixed, 250.0) == fixed[1]


def test_without_a_fixed_configuration_within_the_target_the_best_is_the_lowest_p99():
    fixed = [{"executors": 1, "epoch_ms": 50, "p99_ms": 8000.0},
             {"executors": 2, "epoch_ms": 200, "p99_ms": 5000.0},
             {"executors": 2, "epoch_ms": 50, "p99_ms": None}]
    assert best_fixed(fixed, 250.0) == fixed[1]


def test_a_side_of_several_rounds_is_its_run_of_median_p99_with_every_rounds_p99():
    runs = [{"p99_ms": 900.0, "timeline": "a"}, {"p99_ms": 300.0, "timeline": "b"},
            {"p99_ms": 500.0, "timeline": "c"}, {"p99_ms": None, "timeline": "d"}]
    got = median_run(runs)
    assert got["timeline"] == "c"  # the lower middle of four (a run without a p99 ranks last)
    assert got["p99_ms_rounds"] == [900.0, 300.0, 500.0, None]
    assert median_run(runs[:3])["timeline"] == "c"
