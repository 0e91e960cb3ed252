"""PNG figures for ``kronos eval`` and ``kronos backtest`` (matplotlib, Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "plots need matplotlib: pip install 'kronos-portfolio[eval]'"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def band_colours(levels) -> dict[float, tuple[float, ...]]:
    """One opaque colour per central band level, the widest band lightest: {level: RGBA}.

    Bands are drawn widest first and opaque, so each ring between two levels shows its own
    colour (stacked translucent fills made the 80% and 90% bands nearly one shade). The
    shades are spread evenly over a light-to-mid stretch of the Blues colour map.
    """
    from matplotlib import colormaps

    ordered = sorted(levels, reverse=True)  # widest first
    cmap = colormaps["Blues"]
    if len(ordered) == 1:
        return {ordered[0]: tuple(cmap(0.45))}
    return {lv: tuple(cmap(0.2 + 0.5 * i / (len(ordered) - 1))) for i, lv in enumerate(ordered)}


def _index_axis(ax, stamps) -> None:
    """Label an axis of bar indices with the bars' times (``stamps`` (n,), one per index):
    nights, weekends and holidays take no room, so intraday and FX series show no straight
    lines across them."""
    import pandas as pd
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    stamps = pd.DatetimeIndex(stamps)
    daily = bool(len(stamps)) and bool((stamps == stamps.normalize()).all())
    fmt = "%Y-%m-%d" if daily else "%Y-%m-%d %H:%M"

    def label(x, _pos):
        i = int(round(x))
        return stamps[i].strftime(fmt) if 0 <= i < len(stamps) and abs(x - i) < 1e-6 else ""

    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlabel("bar (trading time)")


def fan_figure(title: str, hist_ts, hist, fut_ts, truth, mean, bands: dict[float, tuple]):
    """The fan chart's figure: x is the bar index (history 0..n-1, then the forecast bars
    n..n+H-1), times as tick labels; bands {level: (lower (H,), upper (H,))}."""
    import pandas as pd

    plt = _plt()
    n, h = len(hist), len(truth)
    x_hist, x_fut = np.arange(n), np.arange(n, n + h)  # (n,), (H,)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(x_hist, hist, color="0.3", lw=1, label="history")
    colours = band_colours(bands)
    for level in sorted(bands, reverse=True):
        lo, hi = bands[level]
        ax.fill_between(x_fut, lo, hi, color=colours[level], lw=0, label=f"{level:.0%} band")
    ax.plot(x_fut, truth, color="black", lw=1.5, marker=".", label="truth")
    ax.plot(x_fut, mean, color="tab:orange", lw=1.5, label="forecast mean")
    _index_axis(ax, pd.DatetimeIndex(hist_ts).append(pd.DatetimeIndex(fut_ts)))
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def fan_chart(
    path: Path, title: str, hist_ts, hist, fut_ts, truth, mean, bands: dict[float, tuple]
) -> Path:
    """History, truth, forecast mean and central bands {level: (lower (H,), upper (H,))}, as a
    PNG."""
    plt = _plt()
    fig = fan_figure(title, hist_ts, hist, fut_ts, truth, mean, bands)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def coverage_plot(path: Path, cards: dict[str, dict]) -> Path:
    """Observed against nominal coverage of the central intervals, one line per forecaster."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", label="ideal")
    for name, card in cards.items():
        xs = [float(k) for k in card["coverage"]]
        ys = [card["coverage"][k] for k in card["coverage"]]
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel("nominal coverage")
    ax.set_ylabel("observed coverage")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pit_plot(path: Path, pit: dict, title: str = "PIT histogram") -> Path:
    """PIT density per bin (1 = uniform = calibrated)."""
    plt = _plt()
    edges = np.array(pit["edges"])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(edges[:-1], pit["density"], width=np.diff(edges), align="edge", edgecolor="white")
    ax.axhline(1.0, color="black", ls="--", lw=1, label="uniform")
    ax.set_xlabel("PIT")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def equity_figure(ts, curves: dict[str, np.ndarray], title: str = "equity"):
    """Equity curves (top) and their drawdowns (bottom panel) by bar index, times as tick labels."""
    plt = _plt()
    fig, (ax, dd) = plt.subplots(
        2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for name, eq in curves.items():
        eq = np.asarray(eq, dtype=np.float64)  # (T,)
        x = np.arange(len(eq))
        ax.plot(x, eq, lw=1.2, label=name)
        dd.plot(x, eq / np.maximum.accumulate(eq) - 1.0, lw=1)
    ax.set_ylabel("equity")
    ax.set_title(title)
    ax.legend(fontsize=8)
    dd.set_ylabel("drawdown")
    _index_axis(dd, ts)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def equity_plot(path: Path, ts, curves: dict[str, np.ndarray], title: str = "equity") -> Path:
    """Equity curves and drawdowns (``equity_figure``) as a PNG."""
    plt = _plt()
    fig = equity_figure(ts, curves, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
