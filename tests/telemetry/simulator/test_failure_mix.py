"""The root-cause sampler follows the Llama 3 405B counts."""
import numpy as np
from scipy.stats import chisquare

from telemetry.simulator import failures


def test_the_mix_is_the_llama3_table_of_419():
    assert failures.TOTAL == 419
    assert failures.BY_NAME["faulty_gpu"].count == 148
    assert failures.BY_NAME["hbm3"].count == 72
    assert sum(1 for c in failures.CAUSES if c.count == 2) == 5


def test_many_draws_follow_the_counts_within_tolerance():
    rng = np.random.default_rng(123)
    draws = failures.sample_causes(rng, 200_000)
    names = [c.name for c in failures.CAUSES]
    observed = np.array([sum(1 for d in draws if d.name == n) for n in names], float)
    expected = failures.WEIGHTS * len(draws)
    assert chisquare(observed, expected).pvalue > 0.001
    for obs, exp, name in zip(observed, expected, names):
        assert abs(obs - exp) <= max(5 * np.sqrt(exp), 0.02 * exp), name


def test_lead_times_stay_in_each_causes_bounds():
    rng = np.random.default_rng(5)
    for cause in failures.CAUSES:
        if not cause.chain:
            continue
        leads = [failures.draw_lead_h(rng, cause) for _ in range(500)]
        assert min(leads) >= cause.lead_min_h and max(leads) <= cause.lead_max_h
        assert cause.lead_min_h < np.median(leads) < cause.lead_max_h
