"""The corpus as a source of `kronos eval`, `kronos calibrate` and `kronos backtest`: hold-out
rules, the grouped report, GARCH in every report, several models compared (tiny synthetic corpus
written to tmp_path, random-weight tiny model)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY

from kronos_core.cli import main
from kronos_core.loading import DEFAULT_MODEL_DIR
from tests.eval.eval_corpus import INSTRUMENTS, write_corpus

EVAL = ["--lookback", "32", "--sample-count", "4", "--model", TINY, "--device", "cpu"]


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus")


def test_eval_windows_lie_in_each_series_evaluation_period(corpus):
    from kronos_core.cli.model_runs import eval_windows
    from kronos_core.eval.sources import corpus_source

    source = corpus_source(corpus)
    args = SimpleNamespace(lookback=32, windows=4, step=None, start=None, end=None,
                           last_fraction=None)
    w = eval_windows(args, source, 5)
    assert len(w) == 4 * len(INSTRUMENTS)
    for i in range(len(w)):
        k, o = int(w.series_index[i]), int(w.origins[i])
        s, info = source.series[k], source.info[k]
        assert s.timestamps[o] >= info.eval_from  # the origin and so every truth row
        assert s.timestamps[o - 1] < s.timestamps[o]
        np.testing.assert_array_equal(w.truth[i], s.values[o:o + 5])
    # spread over the evaluation period, not bunched at its end
    k0 = np.flatnonzero(w.series_index == 0)
    first_eval = int(source.series[0].timestamps.searchsorted(source.info[0].eval_from))
    assert w.origins[k0].min() - first_eval < 20
    assert {i.holdout for i in source.info} == {"time", "instrument"}


def test_max_series_per_group_is_deterministic_by_symbol_hash(corpus):
    from kronos_core.eval.sources import corpus_source, symbol_hash

    one = corpus_source(corpus, max_per_group=1)
    again = corpus_source(corpus, max_per_group=1)
    names = [s.name for s in one.series]
    assert names == [s.name for s in again.series]
    us_train = sorted(("AAA", "BBB", "CCC"), key=symbol_hash)[0]
    assert set(names) == {us_train, "HHH", "EUR/XXX@1h"}  # one per (market, frequency, hold-out)
    assert corpus_source(corpus, split="holdout_instrument").selection["series_taken"] == 1


def test_corpus_eval_report_per_group_and_holdout(corpus, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["eval", "--corpus", str(corpus), "--horizon", "1", "3", "--windows", "3", *EVAL,
               "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["data"]["source"] == "corpus" and report["data"]["horizons"] == [1, 3]
    assert "garch" in report["baselines"] and report["garch"]["fits"]["AAA"]["fallback"] is None
    rows = report["groups"]["horizons"]["3"]
    keys = [(r["holdout"], r["market"], r["frequency"]) for r in rows]
    assert keys == [("time", "FX", "1h"), ("time", "US", "1d"), ("time", "all", "all"),
                    ("instrument", "US", "1d"), ("instrument", "all", "all"), ("all", "all", "all")]
    assert [r["windows"] for r in rows] == [3, 9, 12, 3, 3, 15]
    us = rows[1]
    model = report["models"][0]["name"]
    assert set(us["forecasters"]) == {model, "last_value", "drift", "hist_vol", "garch"}
    cmp = us["models"][model]
    ratio = cmp["mase_vs_last_value"]["ratio"]
    cards = us["forecasters"]
    assert ratio == pytest.approx(cards[model]["mase"] / cards["last_value"]["mase"])
    assert cmp["crps_vs_garch"]["verdict"] in ("better", "tie", "worse")
    # the CRPS ratios are of the scaled CRPS, the paired test's per-window loss
    assert cards[model]["crps_scaled"] == pytest.approx(cmp["tests"]["hist_vol"]["crps"]["mean_a"])
    assert cmp["crps_vs_hist_vol"]["ratio"] == pytest.approx(
        cards[model]["crps_scaled"] / cards["hist_vol"]["crps_scaled"])
    assert set(cmp["tests"]) == {"last_value", "hist_vol", "garch"}
    assert 0 <= cmp["tests"]["hist_vol"]["crps"]["p_value"] <= 1
    # horizon 1 scores the first step of the same windows: its last-value MAE is step 1's
    h1 = report["groups"]["horizons"]["1"][-1]["forecasters"]["last_value"]
    assert h1["mae"] == pytest.approx(report["baselines"]["last_value"]["per_step"]["mae"][0])
    assert "### Horizon 3, instrument hold-out" in text and "### Horizon 1, time hold-out" in text
    assert f"| US | 1d | 3 | 9 | {model} | none |" in text
    assert (tmp_path / "r.md").read_text().count("### Horizon") == 6


def test_calibrate_on_corpus_never_reads_evaluation_rows(tmp_path):
    """Two corpora equal before every eval_from and different after it give the same
    calibration; the file says where it was fitted."""
    a, b = write_corpus(tmp_path / "a"), write_corpus(tmp_path / "b", changed_after_eval=True)
    files = []
    for root in (a, b):
        out = tmp_path / f"{root.name}.json"
        rc = main(["calibrate", "--corpus", str(root), "--horizon", "2", "--windows", "6", *EVAL,
                   "--out", str(out)])
        assert rc == 0
        files.append(json.loads(out.read_text()))
    assert files[0]["corrections"] == files[1]["corrections"]
    assert files[0]["info"]["windows"] == 6 * len(INSTRUMENTS)
    assert "eval_from" in files[0]["info"]["fitted_before"]
    # the evaluation windows do see the difference (the check above can fail)
    reports = []
    for root in (a, b):
        out = tmp_path / f"{root.name}-eval.json"
        assert main(["eval", "--corpus", str(root), "--horizon", "2", "--windows", "2", *EVAL,
                     "--out", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    assert reports[0]["metrics"]["crps"] != reports[1]["metrics"]["crps"]
    # GARCH is fitted before eval_from: the same parameters on both
    assert reports[0]["garch"]["fits"] == reports[1]["garch"]["fits"]


def test_calibrate_corpus_holdout_flags(corpus, tmp_path, capsys):
    rc = main(["calibrate", "--corpus", str(corpus), "--horizon", "2", "--windows", "3",
               "--holdout", "0.3", *EVAL, "--out", str(tmp_path / "c.json")])
    assert rc == 2 and "--holdout is for files" in capsys.readouterr().err
    rc = main(["calibrate", "--corpus", str(corpus), "--symbols", "AAA", "--horizon", "2",
               "--windows", "10", "--holdout-windows", "2", *EVAL,
               "--out", str(tmp_path / "c.json")])
    assert rc == 0 and "| AAA | 0.9 | 2 |" in capsys.readouterr().out


def test_corpus_filters_and_bad_input(corpus, tmp_path, capsys):
    rc = main(["eval", "--corpus", str(corpus), "--market", "XX", "--horizon", "1", *EVAL])
    assert rc == 2 and "unknown market ['XX']" in capsys.readouterr().err
    rc = main(["eval", "--data", str(corpus / "candles.parquet"), "--market", "US",
               "--horizon", "1", *EVAL])
    assert rc == 2 and "--market: only with --corpus" in capsys.readouterr().err
    rc = main(["eval", "--horizon", "1", *EVAL])
    assert rc == 2 and "--corpus DIR" in capsys.readouterr().err
    out = tmp_path / "fx.json"
    rc = main(["eval", "--corpus", str(corpus), "--frequency", "1h", "--split", "train",
               "--horizon", "2", "--windows", "2", *EVAL, "--out", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert [s["name"] for s in report["data"]["series"]] == ["EUR/XXX@1h"]
    assert report["data"]["series"][0]["holdout"] == "time"


def test_backtest_on_corpus_trades_in_the_evaluation_period(corpus, tmp_path, capsys):
    args = ["backtest", "--corpus", str(corpus), "--market", "US", "--horizon", "2",
            "--rebalance", "5", "--top", "1", "--lookback", "32", "--sample-count", "2",
            "--model", TINY, "--device", "cpu"]
    rc = main([*args, "--out", str(tmp_path / "bt")])
    assert rc == 0
    report = json.loads((tmp_path / "bt" / "backtest.json").read_text())
    inst = pd.read_csv(corpus / "instruments.csv", parse_dates=["eval_from"])
    latest = inst.loc[inst.market == "US", "eval_from"].max()
    assert pd.Timestamp(report["settings"]["start"]) == latest
    aaa = pd.read_parquet(corpus / "candles.parquet", filters=[("symbol", "==", "AAA")])
    stamps = pd.DatetimeIndex(aaa["timestamps"])
    # each decision trades at the close before its row and earns the returns from its row on
    assert report["decisions"] and all(stamps[d["row"]] >= latest for d in report["decisions"])
    assert report["decisions"][0]["row"] - stamps.searchsorted(latest) <= 1  # first: at eval_from
    capsys.readouterr()
    rc = main([*args, "--start", "2015-02-01"])
    assert rc == 2 and "before the evaluation period" in capsys.readouterr().err


def test_two_models_on_the_same_windows_with_paired_tests(corpus, tmp_path, capsys):
    out = tmp_path / "two.json"
    rc = main(["eval", "--corpus", str(corpus), "--max-series-per-group", "1", "--horizon", "2",
               "--windows", "3", "--lookback", "32", "--sample-count", "4", "--device", "cpu",
               "--model", TINY, "--model", str(DEFAULT_MODEL_DIR), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    a, b = (m["name"] for m in report["models"])
    assert a != b and all(m["calibration"] is None for m in report["models"])
    pooled = report["groups"]["horizons"]["2"][-1]
    assert pooled["forecasters"][a]["windows"] == pooled["forecasters"][b]["windows"] == 9
    test = pooled["models"][a]["tests"][b]
    assert test["crps"]["windows"] == 9 and 0 <= test["crps"]["p_value"] <= 1
    assert test["abs_error"]["mean_difference"] == pytest.approx(
        -pooled["models"][b]["tests"][a]["abs_error"]["mean_difference"])
    assert "### Models compared" in text and f"| {a} | {b} |" in text
    assert text.count(f"| {b} |") >= 3  # a row in each group table


def test_eval_reports_each_models_tokenizer_fidelity_per_group(corpus, tmp_path, capsys):
    """The section holds, per model and (market, frequency), what ``tokenizer_fidelity`` gives
    on exactly the evaluated windows' contexts."""
    from kronos_core.cli.model_runs import eval_windows
    from kronos_core.eval.fidelity import tokenizer_fidelity
    from kronos_core.eval.sources import corpus_source
    from kronos_core.loading import PredictorConfig, load_predictor

    out = tmp_path / "fid.json"
    rc = main(["eval", "--corpus", str(corpus), "--horizon", "2", "--windows", "3", *EVAL,
               "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    section = json.loads(out.read_text())["tokenizer_fidelity"]
    (name, groups), = section["models"].items()
    assert set(groups) == {"US/1d", "FX/1h", "all"}
    source = corpus_source(corpus)
    args = SimpleNamespace(lookback=32, windows=3, step=None, start=None, end=None,
                           last_fraction=None)
    w = eval_windows(args, source, 2)
    us = np.array([source.info[int(k)].group == ("US", "1d") for k in w.series_index])
    tok = load_predictor(PredictorConfig(model=TINY, device="cpu")).tokenizer
    expect = tokenizer_fidelity(tok, w.context[us])
    for feature in ("close", "open"):
        assert groups["US/1d"][feature]["error_std"] == pytest.approx(expect[feature]["error_std"])
        assert groups["US/1d"][feature]["windows"] == 12
    assert groups["FX/1h"]["volume"]["windows"] == 3
    assert "### Tokenizer round trip" in text and f"| {name} | US/1d | 12 |" in text


def test_calibration_per_frequency_then_eval_scores_each_group_through_its_member(corpus, tmp_path):
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--corpus", str(corpus), "--horizon", "2", "--windows", "10",
                 "--group-by", "frequency", *EVAL, "--out", str(cal)]) == 0
    assert set(json.loads(cal.read_text())["groups"]) == {"1d", "1h"}
    out = tmp_path / "r.json"
    assert main(["eval", "--corpus", str(corpus), "--horizon", "1", "2", "--windows", "3", *EVAL,
                 "--calibration", str(cal), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    model = report["models"][0]
    calibrated = f"{model['name']} + {model['calibration_method']} calibration"
    for row in report["groups"]["horizons"]["2"]:
        assert calibrated in row["models"] and calibrated in row["forecasters"]
        raw, cal_card = row["forecasters"][model["name"]], row["forecasters"][calibrated]
        assert raw["windows"] == cal_card["windows"] and raw["crps"] != cal_card["crps"]
    assert report["metrics"]["crps"] != report["metrics_raw"]["crps"]
