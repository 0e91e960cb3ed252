"""ForecastOptions (validated, hashable) and the one quantile labeller."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.base.options import ForecastOptions, quantile_column, quantile_label


def test_options_validate_and_normalise():
    o = ForecastOptions(np.int64(5), sample_count=2, top_k=None, quantiles=[0.1, np.float32(0.5)])
    assert o.horizon == 5 and type(o.horizon) is int and o.top_k == 0
    assert o.quantiles == (0.1, float(np.float32(0.5)))
    with pytest.raises(ValueError, match="must be a positive integer"):
        ForecastOptions(0)
    with pytest.raises(ValueError, match="sample_count must be a positive integer"):
        ForecastOptions(3, sample_count=0)
    with pytest.raises(ValueError, match="quantiles must be in"):
        ForecastOptions(3, quantiles=(0.5, 1.0))
    with pytest.raises(ValueError, match="sliding must be one of"):
        ForecastOptions(3, sliding="fast")
    with pytest.raises(ValueError, match="positive integer"):
        o.with_(horizon=-1)


def test_options_with_a_calibration_are_hashable():
    """Options are dictionary keys (shards with equal options share an engine call)."""
    from kronos_core.calibration.conformal import Calibration

    rng = np.random.default_rng(0)
    paths = np.exp(rng.normal(0, 0.02, (30, 16, 2, 6))).astype(np.float32)
    truth = np.exp(rng.normal(0, 0.02, (30, 2, 6))).astype(np.float32)
    cal = Calibration.fit(paths, truth, (0.8,), {"name": "m", "sha256": "a" * 64})
    a = ForecastOptions(2, quantiles=(0.1, 0.9), calibration=cal)
    groups = {a: 1, a.with_(): 2, ForecastOptions(2, quantiles=(0.1, 0.9)): 3}
    assert len(groups) == 2 and groups[a] == 2


def test_quantile_label_is_exact_and_distinct():
    assert quantile_label(0.1) == "0.1" and quantile_label(np.float32(0.5)) == "0.5"
    assert quantile_label(1 / 3) == repr(1 / 3)
    assert quantile_label(0.1234567) != quantile_label(0.1234568)
    assert float(quantile_label(0.1234568)) == 0.1234568  # round-trips
    assert quantile_column("close", 0.05) == "close_q0.05"
