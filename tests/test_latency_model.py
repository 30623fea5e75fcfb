"""The latency model the controller fits online (slash.control.latency_model): what
it recovers from a known law, what it refuses to learn from, and how a
setting is chosen from it."""
import numpy as np
import pytest

from slash.control.latency_model import MAX_UTILISATION, LatencyModel, choose, queueing


def law(e, u):
    return 80.0 + 1.5 * e + 200.0 * u / (1.0 - u)


def test_the_fit_recovers_a_known_law_from_noisy_observations():
    rng = np.random.default_rng(7)
    m = LatencyModel()
    for e in (50, 100, 200, 400):
        for u in (0.1, 0.3, 0.5, 0.7, 0.8):
            m.add(e, u, law(e, u) + rng.normal(0, 5))
    fit = m.fit()
    assert fit.fixed == pytest.approx(80, rel=0.1)
    assert fit.per_epoch == pytest.approx(1.5, rel=0.1)
    assert fit.queueing == pytest.approx(200, rel=0.1)
    assert fit.rms_ms < 10


def test_the_coefficients_are_never_negative():
    m = LatencyModel()
    for i, e in enumerate((50, 100, 200, 400, 800, 1600)):
        m.add(e, 0.2, 1000.0 - 0.3 * e)  # latency falling with the epoch: no term says that
    fit = m.fit()
    assert min(fit.fixed, fit.per_epoch, fit.queueing) >= 0
    assert fit.per_epoch == 0


def test_no_fit_below_min_points():
    m = LatencyModel(min_points=6)
    for _ in range(5):
        m.add(100, 0.2, 150)
    assert m.fit() is None
    m.add(100, 0.2, 150)
    assert m.fit() is not None


@pytest.mark.parametrize("obs", [(100, MAX_UTILISATION, 500), (100, 1.2, 500), (100, 0.2, float("nan")),
                                 (0, 0.2, 100), (100, -0.1, 100)])
def test_saturated_or_invalid_observations_are_not_recorded(obs):
    m = LatencyModel()
    assert m.add(*obs) is False and len(m) == 0


def test_a_never_changed_epoch_leaves_the_unexplained_part_to_the_fixed_term():
    m = LatencyModel()
    for _ in range(10):
        m.add(100, 0.2, 400)  # nothing varies: the prior places it
    fit = m.fit()
    assert fit.predict(100, 0.2) == pytest.approx(400, rel=0.01)
    assert fit.limiting(100, 0.2)[0] == "fixed"
    assert 1.0 <= fit.per_epoch <= 1.5  # near its prior: one epoch of wait


def test_only_the_newest_observations_are_kept():
    m = LatencyModel(keep=10)
    for _ in range(30):
        m.add(100, 0.2, 1000)
    for _ in range(10):
        m.add(100, 0.2, 200)
    assert m.fit().predict(100, 0.2) == pytest.approx(200, rel=0.01)


def _fitted_law():
    """The fit of ``law`` observed over epochs 50-400 ms and u 0.1-0.7."""
    m = LatencyModel()
    for e in (50, 100, 200, 400):
        for u in (0.1, 0.3, 0.5, 0.7):
            m.add(e, u, law(e, u))
    return m.fit()


def test_choose_takes_the_fewest_executors_then_the_longest_epoch_within_target():
    fit = _fitted_law()
    util = {1: 0.9, 2: 0.45, 3: 0.3, 4: 0.225}
    got = choose(fit, target_ms=600, epochs=[50, 100, 200, 400], executors=[1, 2, 3, 4],
                 utilisation=util, fit_limit=0.6)
    # 1 executor is over fit; with 2 (u 0.45): 80 + 1.5 e + 164 <= 600 -> e <= 237: 200
    assert got == (2, 200)
    assert law(200, 0.45) <= 600 < law(400, 0.45)
    assert choose(fit, target_ms=100, epochs=[50], executors=[1, 2], utilisation=util,
                  fit_limit=0.6) is None


def test_choose_counts_what_shorter_epochs_add_to_the_utilisation():
    fit = _fitted_law()
    # at u 0.2 every epoch up to 200 ms is within 600 ms; epochs of e ms add 20 / e to u:
    # 50 ms brings it to 0.6 (not under fit), 100 ms to 0.4
    cost = {50: 0.4, 100: 0.2, 200: 0.1}
    assert choose(fit, target_ms=600, epochs=[50, 100, 200], executors=[1],
                  utilisation={1: 0.2}, fit_limit=0.6, epoch_cost=lambda e: cost[e]) == (1, 200)
    assert choose(fit, target_ms=400, epochs=[50, 100], executors=[1], utilisation={1: 0.2},
                  fit_limit=0.6, epoch_cost=lambda e: cost[e]) == (1, 100)
    assert law(100, 0.4) <= 400
    # 50 ms is predicted within 500 ms even at u 0.6, but the utilisation is not under fit
    assert law(50, 0.6) <= 500
    assert choose(fit, target_ms=500, epochs=[50], executors=[1], utilisation={1: 0.2},
                  fit_limit=0.6, epoch_cost=lambda e: cost[e]) is None


def test_queueing_grows_without_bound_toward_saturation_but_is_capped():
    assert queueing(0.0) == 0 and queueing(0.5) == pytest.approx(1.0)
    assert queueing(2.0) == queueing(MAX_UTILISATION)


def test_the_queueing_term_is_believed_only_over_a_span_of_utilisation():
    narrow, wide = LatencyModel(), LatencyModel()
    rng = np.random.default_rng(3)
    for i in range(20):
        narrow.add(100, 0.02 + 0.004 * (i % 5), 100 + rng.normal(0, 30))  # jitter at u 0.02-0.04
        wide.add(100, 0.1 + 0.1 * (i % 5), law(100, 0.1 + 0.1 * (i % 5)))
    assert not narrow.fit().queueing_known
    assert wide.fit().queueing_known
