"""Windows, normalisation on the lookback only, the time split and the step-batch sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from train_helpers import GOOG, REAL

from kronos_core.train.config import DataConfig
from kronos_core.train.data import (
    StepBatchSampler,
    WindowDataset,
    load_series,
    make_loader,
    normalize_window,
    split_windows,
)


def test_future_part_does_not_change_the_input():
    cfg = DataConfig(paths=[str(GOOG)], lookback=40, horizon=10)
    series = load_series(cfg)
    ds = WindowDataset(series, [(0, 100)], cfg)
    before = ds[0]["x"].clone()
    series[0].values[100 + 40:100 + 50] *= 3.0  # change only the future part of the window
    after = ds[0]["x"]
    assert torch.equal(before[:40], after[:40])
    assert not torch.equal(before[40:], after[40:])  # the targets do follow the data


def test_normalisation_uses_lookback_statistics():
    rng = np.random.default_rng(0)
    window = rng.normal(10, 2, size=(30, 6)).astype(np.float32)
    out = normalize_window(window, lookback=20, clip=5.0)
    past = window[:20]
    expected = np.clip((window - past.mean(0)) / (past.std(0) + 1e-5), -5, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:20].mean(0), 0, atol=1e-4)


def test_split_by_time_without_overlap():
    cfg = DataConfig(paths=[str(REAL)], lookback=64, horizon=16, stride=8, val_fraction=0.2)
    series = load_series(cfg)
    assert len(series) == 3  # the bundled real series: GOOG, EUR/USD, S&P 500
    train, val = split_windows(series, cfg)
    assert train and val
    for sid in range(len(series)):
        last_train_end = max(s + cfg.window for i, s in train if i == sid)
        first_val_start = min(s for i, s in val if i == sid)
        assert last_train_end <= first_val_start  # validation starts after training ends


def test_too_short_data_names_the_file(tmp_path):
    small = tmp_path / "short.csv"
    small.write_text(
        GOOG.read_text().splitlines()[0] + "\n" + "\n".join(GOOG.read_text().splitlines()[1:20])
    )
    cfg = DataConfig(paths=[str(small)], lookback=64, horizon=16)
    with pytest.raises(ValueError, match="short.csv"):
        split_windows(load_series(cfg), cfg)


def test_two_ranks_share_exactly_the_single_process_batches():
    whole = StepBatchSampler(50, 8, seed=3)
    halves = [StepBatchSampler(50, 8, seed=3, rank=r, world=2) for r in range(2)]
    for epoch in (0, 1):
        for s in (whole, *halves):
            s.epoch, s.position = epoch, 0
        for big, a, b in zip(whole, *halves):
            assert big == a + b and len(a) == len(b) == 4
    assert len(list(whole)) == 50 // 8


def test_sampler_resumes_mid_epoch():
    full = list(StepBatchSampler(40, 4, seed=1))
    later = StepBatchSampler(40, 4, seed=1)
    later.position = 3
    assert list(later) == full[3:]


def test_loader_with_worker_processes_matches_in_process():
    cfg = DataConfig(paths=[str(GOOG)], lookback=24, horizon=8, stride=32)
    series = load_series(cfg)
    train, _ = split_windows(series, cfg)
    ds = WindowDataset(series, train, cfg)
    get = lambda workers: [  # noqa: E731
        b["x"] for b in make_loader(ds, StepBatchSampler(len(ds), 8, seed=0), workers)
    ]
    for a, b in zip(get(0), get(2)):
        assert torch.equal(a, b)


def test_files_go_through_the_shared_reader(tmp_path):
    """Training reads files like import and forecast do: any-case names, rows sorted by time."""
    import pandas as pd

    df = pd.read_csv(GOOG).head(120)
    other = df.rename(columns={"timestamps": "Date", "open": "Open", "high": "High", "low": "Low",
                               "close": "Close", "volume": "Volume"}).iloc[::-1]  # newest first
    path = tmp_path / "mixed_case.csv"
    other.to_csv(path, index=False)
    [series] = load_series(DataConfig(paths=[str(path)], lookback=40, horizon=10))
    [want] = load_series(DataConfig(paths=[str(GOOG)], lookback=40, horizon=10))
    np.testing.assert_allclose(series.values, want.values[:120], rtol=1e-6)
    np.testing.assert_array_equal(series.stamps, want.stamps[:120])
