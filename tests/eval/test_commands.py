"""`kronos eval`, `kronos calibrate`, `kronos backtest` and `kronos forecast --calibration`
on bundled real data and on CSVs the project has never seen (tiny windows, bundled model)."""

from __future__ import annotations

import json

import pytest
from fixture_paths import TINY

from kronos_core.cli import main

PNG = b"\x89PNG\r\n\x1a\n"
KEYS = {"mae", "rmse", "mase", "direction_accuracy", "crps", "brier_up", "coverage"}


def _png(path):
    assert path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 5000, path


def test_eval_on_real_and_unseen_data(real_dir, unseen_csv, tmp_path, capsys):
    out = tmp_path / "report.json"
    rc = main(
        [
            "eval", "--data", str(real_dir / "goog_daily.csv"), str(unseen_csv), "--lookback", "32",
            "--horizon", "2", "--windows", "3", "--sample-count", "4", "--model", TINY, "--device",
            "cpu", "--out", str(out), "--plot", str(tmp_path / "plots"), "--plot-series",
            "usdeur_hourly",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "| forecaster |" in text and "windows/s" in text and "hist_vol" in text
    report = json.loads(out.read_text())
    assert {"model", "data", "metrics", "baselines", "regimes"} <= set(report)
    assert KEYS <= set(report["metrics"])
    assert set(report["metrics"]["coverage"]) == {"0.5", "0.8", "0.9"}
    assert set(report["baselines"]) == {"last_value", "drift", "seasonal_naive", "hist_vol",
                                        "garch"}
    for card in report["baselines"].values():
        assert KEYS <= set(card)
        assert all(0 <= v <= 1 for v in card["coverage"].values())
    assert report["data"]["windows"] == 6 and report["model"]["sha256"]
    assert sum(report["regimes"][r]["windows"] for r in ("bull", "bear", "sideways")) == 6
    assert report["data"]["series"][1]["season"] == 24  # hourly FX: a daily season
    # per series: the same metrics on each series' own windows; pooled MAE is their window-weighted
    # mean
    per = report["series"]
    assert list(per) == ["goog_daily", "usdeur_hourly"] and [
        c["windows"] for c in per.values()
    ] == [3, 3]
    for who in ("model", "last_value"):
        cards = [c[who] if who == "model" else c["baselines"][who] for c in per.values()]
        pooled = report["metrics"] if who == "model" else report["baselines"][who]
        assert pooled["mae"] == pytest.approx(sum(c["mae"] for c in cards) / 2)
    assert per["goog_daily"]["model"]["mae"] != pytest.approx(per["usdeur_hourly"]["model"]["mae"])
    assert (
        "### Series goog_daily (3 windows)" in text
        and "### Series usdeur_hourly (3 windows)" in text
    )
    assert text.index("### Series goog_daily") < text.index("### Regime")
    for name in ("coverage.png", "pit.png", "fan_usdeur_hourly.png"):
        _png(tmp_path / "plots" / name)
    # the run's ResourceMonitor report
    resources = json.loads((tmp_path / "report.monitor.json").read_text())
    assert resources["summary"]["samples"] == 6 and resources["summary"]["rss_bytes_peak"] > 0
    assert "resource report written to" in text


def test_calibrate_then_forecast_with_it(unseen_csv, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    rc = main(
        [
            "calibrate", "--data", str(unseen_csv), "--lookback", "32", "--horizon", "2",
            "--windows", "10", "--holdout", "0.3", "--holdout-windows", "3", "--sample-count", "2",
            "--model", TINY, "--device", "cpu", "--out", str(cal),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "| before | cqr |" in text and "| usdeur_hourly | 0.9 | 3 |" in text
    saved = json.loads(cal.read_text())
    assert saved["method"] == "cqr" and saved["horizon"] == 2 and saved["levels"] == [0.5, 0.8, 0.9]
    assert saved["model"]["sha256"] and "Romano" in saved["citation"]
    rc = main(
        [
            "forecast", "--csv", str(unseen_csv), "--horizon", "2", "--samples", "4", "--seed", "1",
            "--quantiles", "0.1,0.9", "--calibration", str(cal), "--summary", "--model", TINY,
            "--device", "cpu",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "close_q0.9" in text and "var_95=" in text and "p_up=" in text
    report = tmp_path / "calibrated.json"
    rc = main(
        [
            "eval", "--data", str(unseen_csv), "--lookback", "32", "--horizon", "2", "--windows",
            "2", "--sample-count", "2", "--calibration", str(cal), "--model", TINY, "--device",
            "cpu", "--out", str(report),
        ]
    )
    assert rc == 0
    assert json.loads(report.read_text())["model"]["calibration"] == str(cal)
    capsys.readouterr()
    saved["model"]["sha256"] = "0" * 64
    saved["model"]["name"] = "someone-else"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(saved))
    rc = main(["forecast", "--csv", str(unseen_csv), "--horizon", "2", "--calibration", str(other),
               "--model", TINY, "--device", "cpu"])
    assert rc == 2
    assert "someone-else" in capsys.readouterr().err


def test_calibrate_aci_with_comparisons_then_forecast(unseen_csv, tmp_path, capsys):
    """--method aci --compare cqr,select: one table with every method on the same held-out windows
    (ACI static and walked on), the file keeps the ACI state, forecast and eval accept it."""
    cal = tmp_path / "aci.json"
    cache = tmp_path / "cache"
    args = [
        "calibrate", "--data", str(unseen_csv), "--lookback", "32", "--horizon", "2", "--windows",
        "24", "--holdout", "0.3", "--holdout-windows", "4", "--sample-count", "2", "--model", TINY,
        "--device", "cpu", "--method", "aci", "--compare", "cqr,select", "--paths-cache",
        str(cache), "--out", str(cal),
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("| series"))
    assert "| before | aci | aci online | cqr | select (cqr" in header
    assert text.count("| usdeur_hourly |") == 3 and "gamma" in text
    saved = json.loads(cal.read_text())
    assert (
        saved["method"] == "aci"
        and "Gibbs" in saved["citation"]
        and saved["aci_state"]["window"] == 12
    )
    assert saved["info"]["aci"]["gamma"] in (0.005, 0.01, 0.02, 0.05)
    assert len(list(cache.glob("paths-*.npz"))) == 2  # calibration and held-out windows
    # from the cache
    assert main(args) == 0 and capsys.readouterr().out.splitlines()[-3:] == text.splitlines()[-3:]
    rc = main(
        [
            "forecast", "--csv", str(unseen_csv), "--horizon", "2", "--samples", "4", "--seed", "1",
            "--quantiles", "0.1,0.9", "--calibration", str(cal), "--model", TINY, "--device", "cpu",
        ]
    )
    assert rc == 0 and "close_q0.9" in capsys.readouterr().out
    report = tmp_path / "with_aci.json"
    rc = main(
        [
            "eval", "--data", str(unseen_csv), "--lookback", "32", "--horizon", "2", "--windows",
            "2", "--sample-count", "2", "--calibration", str(cal), "--model", TINY, "--device",
            "cpu", "--out", str(report),
        ]
    )
    assert rc == 0 and json.loads(report.read_text())["model"]["calibration"] == str(cal)
    capsys.readouterr()
    assert main(["calibrate", *args[1:-2], "--compare", "nope", "--out", str(cal)]) == 2
    assert "not a method" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--long-short", "--rank", "sharpe"]])
def test_backtest_on_unseen_universe(unseen_universe, tmp_path, capsys, extra):
    out = tmp_path / "bt"
    rc = main(
        [
            "backtest", "--data", *map(str, unseen_universe), "--lookback", "32", "--horizon", "2",
            "--rebalance", "60", "--top", "1", "--cost-bps", "5", "--sample-count", "2", "--model",
            TINY, "--device", "cpu", "--out", str(out), *extra,
        ]
    )
    assert rc == 0
    assert "| momentum |" in capsys.readouterr().out
    report = json.loads((out / "backtest.json").read_text())
    assert set(report["performance"]) == {"model", "momentum", "equal_weight"}
    perf = report["performance"]["model"]
    for key in ("annual_return", "annual_volatility", "sharpe", "sortino", "max_drawdown", "calmar",
                "hit_rate", "turnover", "excess_annual_return"):
        assert key in perf
    weights = report["decisions"][0]["weights"]
    assert sum(w > 0 for w in weights) == 1 and sum(w < 0 for w in weights) == (1 if extra else 0)
    assert (out / "backtest.md").read_text().startswith("# Backtest")
    _png(out / "equity.png")


def test_backtest_on_real_data_and_bad_inputs(real_dir, tmp_path, capsys):
    rc = main(
        [
            "backtest", "--data", str(real_dir / "goog_daily.csv"),
            str(real_dir / "sp500_daily.csv"), "--lookback", "32", "--horizon", "2", "--rebalance",
            "500", "--top", "1", "--sample-count", "2", "--model", TINY, "--device", "cpu",
        ]
    )
    assert rc == 0 and "| model |" in capsys.readouterr().out
    rc = main(
        [
            "backtest", "--data", str(tmp_path / "missing.csv"), "--horizon", "2", "--rebalance",
            "5", "--top", "1",
        ]
    )
    assert rc == 2 and "missing.csv" in capsys.readouterr().err


def _vendor_files(real_dir, tmp_path) -> list[str]:
    """Two vendor downloads: ``Date,Open,High,Low,Close,Adj Close,Volume``, newest row first."""
    import pandas as pd

    out, dates = [], pd.read_csv(real_dir / "goog_daily.csv")["timestamps"].iloc[:300]
    for name in ("goog_daily", "sp500_daily"):
        df = pd.read_csv(real_dir / f"{name}.csv")
        df = df[df["timestamps"].isin(dates)]  # one calendar, as a backtest needs
        vendor = pd.DataFrame(
            {
                "Date": df["timestamps"], "Open": df["open"], "High": df["high"], "Low": df["low"],
                "Close": df["close"], "Adj Close": df["close"] * 0.98, "Volume": df["volume"],
            }
        )
        path = tmp_path / f"{name}_vendor.csv"
        vendor.iloc[::-1].to_csv(path, index=False)
        out.append(str(path))
    return out


def test_eval_calibrate_backtest_read_a_vendor_file_like_forecast(real_dir, tmp_path, capsys):
    """The reader's flags (--time-column, --sort, --drop-nan, ...) on every command that reads
    candles; unsorted rows are refused with the flag that fixes them, and --timestamp-column still
    works."""
    files = _vendor_files(real_dir, tmp_path)
    model = ["--model", TINY, "--device", "cpu"]
    window = ["--lookback", "32", "--horizon", "2", "--sample-count", "2"]
    assert main(["eval", "--data", *files, *window, "--windows", "2", *model]) == 2
    assert "--sort" in capsys.readouterr().err
    assert (
        main(
            [
                "eval", "--data", *files, *window, "--windows", "2", "--time-column", "Date",
                "--sort", *model,
            ]
        )
        == 0
    )
    assert "| forecaster |" in capsys.readouterr().out
    cal = tmp_path / "cal.json"
    assert (
        main(
            [
                "calibrate", "--data", files[0], *window, "--windows", "12", "--sort", "--drop-nan",
                "--out", str(cal), *model,
            ]
        )
        == 0
    )
    assert json.loads(cal.read_text())["horizon"] == 2
    capsys.readouterr()
    assert (
        main(
            [
                "backtest", "--data", *files, *window, "--rebalance", "100", "--top", "1", "--sort",
                "--timestamp-column", "Date", *model,
            ]
        )
        == 0
    )
    assert "| model |" in capsys.readouterr().out


def test_eval_cross_section_on_a_folder_of_csvs(tmp_path, capsys):
    import pandas as pd
    from eval_helpers import spliced_universe

    folder = tmp_path / "universe"
    folder.mkdir()
    for k, df in enumerate(spliced_universe(n_symbols=7, rows=150)):
        df.to_csv(folder / f"SYM{k}.csv", index=False)
    out = tmp_path / "cs.json"
    rc = main(["eval", "--cross-section", "--data", str(folder), "--lookback", "32",
               "--horizon", "1", "2", "--every", "15", "--min-names", "6",
               "--factor-quantiles", "3", "--top-k", "2", "--sample-count", "4", "--model", TINY,
               "--device", "cpu", "--out", str(out), "--plot", str(tmp_path / "plots")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "### Cross-section, horizon 2" in text and "RankIC after removing 5-day reversal" in text
    section = json.loads(out.read_text())["cross_section"]
    assert section["symbols"] == 7 and len(section["dates"]) >= 5
    for h in ("1", "2"):
        per_h = section["horizons"][h]
        assert set(per_h) == {"model", "reversal_5d", "momentum_20d", "low_vol_20d"}
        for s in per_h.values():
            assert {"rank_ic", "rank_ic_t", "icir", "ic", "long_short", "long_short_t",
                    "quantile_returns", "top_turnover", "portfolio"} <= set(s)
            assert -1 <= s["rank_ic"] <= 1 and len(s["quantile_returns"]) == 3
        model = per_h["model"]
        assert 0 <= model["hit_rate"] <= 1 and 0 <= model["brier_up"] <= 1
        assert set(model["corr_with"]) == {"reversal_5d", "momentum_20d", "low_vol_20d"}
        assert "rank_ic_after_reversal_5d" in model
        assert model["portfolio"]["top_k"] == 2 and model["portfolio"]["cost_bps"] == 10.0
    factor_data = pd.read_parquet(out.with_suffix(".factor_data.parquet"))
    assert list(factor_data.index.names) == ["date", "asset"]
    assert {"factor", "factor_quantile", "1D", "2D", "signal"} <= set(factor_data.columns)
    for h in (1, 2):
        _png(tmp_path / "plots" / f"cross_section_rank_ic_h{h}.png")
        _png(tmp_path / "plots" / f"cross_section_quantiles_h{h}.png")


def test_eval_cross_section_refuses_mixed_bar_sizes(real_dir, capsys):
    rc = main(["eval", "--cross-section", "--data", str(real_dir / "goog_daily.csv"),
               str(real_dir / "eurusd_hourly.csv"), "--lookback", "32", "--horizon", "1",
               "--model", TINY, "--device", "cpu"])
    assert rc == 2
    assert "one bar size at a time" in capsys.readouterr().err
