"""The drift-free prior: every training window also seen as its price reflection."""

from __future__ import annotations

import numpy as np

from kronos_core.train.config import DataConfig
from kronos_core.train.data import Series, WindowDataset, normalize_window, reflect_window

OPEN, HIGH, LOW, CLOSE, VOLUME, AMOUNT = range(6)


def _raw_window(rng, rows=40) -> np.ndarray:
    close = 100 * np.exp(np.cumsum(rng.normal(0.002, 0.02, rows)))  # a drifting series
    open_ = close * np.exp(rng.normal(0, 0.005, rows))
    high = np.maximum(open_, close) * (1 + rng.uniform(0, 0.01, rows))
    low = np.minimum(open_, close) * (1 - rng.uniform(0, 0.01, rows))
    volume = rng.uniform(1e3, 1e4, rows)
    return np.stack([open_, high, low, close, volume, volume * close], axis=1).astype(np.float64)


def test_reflection_in_normalised_units_is_the_raw_mirror_about_the_last_close():
    rng = np.random.default_rng(3)
    raw, lookback = _raw_window(rng), 30
    last = raw[lookback - 1, CLOSE]
    mirrored = raw.copy()
    mirrored[:, :4] = 2 * last - raw[:, :4]  # every price mirrored about the last close
    mirrored[:, [HIGH, LOW]] = mirrored[:, [LOW, HIGH]]  # the mirrored low is the new high
    want = normalize_window(mirrored, lookback, clip=50.0)
    got = reflect_window(normalize_window(raw, lookback, clip=50.0))
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert (mirrored[:, HIGH] >= mirrored[:, LOW]).all()  # the mirror is a valid candle
    np.testing.assert_array_equal(got[:, VOLUME:], normalize_window(raw, lookback, 50.0)[:, 4:])


def test_a_reflected_dataset_holds_every_window_both_ways_and_no_direction():
    rng = np.random.default_rng(5)
    series = [Series(f"s{i}", _raw_window(rng, 120).astype(np.float32),
                     np.zeros((120, 5), np.float32)) for i in range(3)]
    cfg = DataConfig(lookback=24, horizon=8, stride=8)
    index = [(k, start) for k in range(3) for start in range(0, 120 - cfg.window + 1, cfg.stride)]
    plain = WindowDataset(series, index, cfg)
    both = WindowDataset(series, index, cfg, reflect=True)
    assert len(both) == 2 * len(plain)
    n = len(plain)
    for i in (0, n // 2, n - 1):
        np.testing.assert_array_equal(both[i]["x"].numpy(), plain[i]["x"].numpy())
        np.testing.assert_array_equal(both[n + i]["x"].numpy(),
                                      reflect_window(plain[i]["x"].numpy()))
    # the plain windows drift up (the series were drawn with a positive mean return); with their
    # reflections, the future close's move from the last context close averages to zero
    def moves(ds):
        return np.array([ds[i]["x"].numpy()[cfg.lookback:, CLOSE].mean()
                         - ds[i]["x"].numpy()[cfg.lookback - 1, CLOSE] for i in range(len(ds))])
    assert moves(plain).mean() > 0.1
    assert abs(moves(both).mean()) < 1e-5
