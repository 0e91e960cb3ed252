"""PNG figures for ``kronos eval`` and ``kronos backtest`` (matplotlib, Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("plots need matplotlib: pip install 'kronos-portfolio[eval]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fan_chart(path: Path, title: str, hist_ts, hist, fut_ts, truth, mean, bands: dict[float, tuple]) -> Path:
    """History, truth, forecast mean and central bands {level: (lower (H,), upper (H,))}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(hist_ts, hist, color="0.3", lw=1, label="history")
    for level in sorted(bands, reverse=True):
        lo, hi = bands[level]
        ax.fill_between(fut_ts, lo, hi, color="tab:blue", alpha=0.15 + 0.25 * (1 - level), lw=0,
                        label=f"{level:.0%} band")
    ax.plot(fut_ts, truth, color="black", lw=1.5, marker=".", label="truth")
    ax.plot(fut_ts, mean, color="tab:orange", lw=1.5, label="forecast mean")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
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


def equity_plot(path: Path, ts, curves: dict[str, np.ndarray], title: str = "equity") -> Path:
    """Equity curves (top) and their drawdowns (bottom panel)."""
    plt = _plt()
    fig, (ax, dd) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for name, eq in curves.items():
        eq = np.asarray(eq, dtype=np.float64)
        ax.plot(ts, eq, lw=1.2, label=name)
        dd.plot(ts, eq / np.maximum.accumulate(eq) - 1.0, lw=1)
    ax.set_ylabel("equity")
    ax.set_title(title)
    ax.legend(fontsize=8)
    dd.set_ylabel("drawdown")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
