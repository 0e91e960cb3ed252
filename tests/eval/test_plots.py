"""Figures: fan-chart bands of clearly distinct shades; history drawn by bar index (no lines
across nights and weekends) with the bars' times as tick labels."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from kronos_core.eval import plots


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure the plot functions save (kept open for inspection)."""
    figures: list[Figure] = []
    real = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _fx_hours(n: int) -> pd.DatetimeIndex:
    """Hourly FX bars, none at weekends: Friday evening is followed by Sunday evening."""
    stamps = pd.date_range("2024-01-05 12:00", periods=200, freq="h")
    return stamps[stamps.dayofweek < 5][:n]


def _luminance(rgba, background=1.0) -> float:
    r, g, b, a = rgba
    over = [a * c + (1 - a) * background for c in (r, g, b)]  # the fill's own shade over white
    return 0.2126 * over[0] + 0.7152 * over[1] + 0.0722 * over[2]


def _fan(tmp_path, saved_figures, levels=(0.5, 0.8, 0.9)):
    stamps = _fx_hours(40)
    hist_ts, fut_ts = stamps[:32], stamps[32:]
    hist = np.linspace(1.0, 1.1, 32)
    mean = np.full(8, 1.1)
    bands = {c: (mean - c / 10, mean + c / 10) for c in levels}
    plots.fan_chart(tmp_path / "fan.png", "fan", hist_ts, hist, fut_ts, mean + 0.01, mean, bands)
    (fig,) = saved_figures
    return fig.axes[0], stamps


def test_fan_chart_bands_have_clearly_distinct_shades(tmp_path, saved_figures):
    ax, _ = _fan(tmp_path, saved_figures)
    fills = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(fills) == 3
    shades = [_luminance(f.get_facecolor()[0]) for f in fills]
    for a, b in itertools.combinations(shades, 2):
        assert abs(a - b) >= 0.1, shades
    assert shades == sorted(shades, reverse=True)  # the widest band lightest


def test_fan_chart_history_is_drawn_by_bar_index_with_times_as_labels(tmp_path, saved_figures):
    ax, stamps = _fan(tmp_path, saved_figures)
    history, truth = ax.lines[0], ax.lines[1]
    np.testing.assert_array_equal(history.get_xdata(), np.arange(32))  # consecutive, weekend or not
    np.testing.assert_array_equal(truth.get_xdata(), np.arange(32, 40))
    label = ax.xaxis.get_major_formatter()
    assert label(32, 0) == stamps[32].strftime("%Y-%m-%d %H:%M")
    friday_last = int(np.flatnonzero(stamps.dayofweek == 4)[-1])
    # a weekend between...
    assert stamps[friday_last + 1] - stamps[friday_last] > pd.Timedelta(hours=1)
    # ...takes one step
    assert history.get_xdata()[friday_last + 1] - history.get_xdata()[friday_last] == 1


def test_equity_plot_by_bar_index(tmp_path, saved_figures):
    stamps = _fx_hours(30)
    plots.equity_plot(tmp_path / "eq.png", stamps, {"model": np.linspace(1, 1.2, 30)})
    (fig,) = saved_figures
    for ax in fig.axes:
        np.testing.assert_array_equal(ax.lines[0].get_xdata(), np.arange(30))
    assert fig.axes[1].xaxis.get_major_formatter()(0, 0) == stamps[0].strftime("%Y-%m-%d %H:%M")
