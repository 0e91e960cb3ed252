"""A model's sampling defaults (kronos.json "sampling"): read by the loader, used by the library
when options name none, shown by the CLI and eval."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from fixture_paths import FIXTURE_DIR

from kronos_core.base.options import ForecastOptions, SamplingDefaults
from kronos_core.loading import PredictorConfig, load_predictor
from kronos_core.model import CheckpointError


def _bundle(tmp_path, sampling):
    folder = tmp_path / "bundle"
    shutil.copytree(FIXTURE_DIR, folder)
    meta = json.loads((folder / "kronos.json").read_text())
    if sampling is None:
        meta.pop("sampling", None)
    else:
        meta["sampling"] = sampling
    (folder / "kronos.json").write_text(json.dumps(meta))
    return folder


def _inputs(n=60, horizon=4):
    rng = np.random.default_rng(0)
    close = 10 + np.cumsum(rng.normal(0, 0.1, n))
    values = np.stack([close, close + 0.1, close - 0.1, close, np.full(n, 100.0),
                       np.full(n, 1000.0)], axis=1).astype(np.float32)
    stamps = pd.date_range("2024-01-01", periods=n + horizon, freq="D")
    return [values], [stamps[:n]], [stamps[n:]]


def test_the_manifest_block_is_validated_with_the_file_named():
    assert SamplingDefaults.from_manifest(None, "x") == SamplingDefaults()
    got = SamplingDefaults.from_manifest({"temperature": 0.8, "top_p": 1.0, "sample_count": 32,
                                          "point": "median", "chosen_by": {}}, "m/kronos.json")
    assert (got.temperature, got.top_p, got.sample_count, got.point) == (0.8, 1.0, 32, "median")
    assert got.source == "m/kronos.json"
    for bad in ({"temperature": 0}, {"top_p": 1.5}, {"sample_count": 0}, {"point": "mode"}):
        with pytest.raises(ValueError, match="m/kronos.json"):
            SamplingDefaults.from_manifest(bad, "m/kronos.json")
    with pytest.raises(ValueError, match="must be an object"):
        SamplingDefaults.from_manifest([1], "m/kronos.json")


def test_options_left_unset_take_the_defaults_and_set_ones_stay():
    d = SamplingDefaults(temperature=0.7, top_p=0.95)
    unset = ForecastOptions(3).with_defaults(d)
    assert (unset.temperature, unset.top_p) == (0.7, 0.95)
    own = ForecastOptions(3, temperature=1.2, top_p=0.5).with_defaults(d)
    assert (own.temperature, own.top_p) == (1.2, 0.5)


def test_the_loader_reads_the_block_and_a_bad_one_is_a_checkpoint_error(tmp_path):
    folder = _bundle(tmp_path, {"temperature": 0.6, "top_p": 1.0, "sample_count": 8,
                                "point": "median"})
    p = load_predictor(PredictorConfig(model=str(folder), device="cpu"))
    assert (p.sampling.temperature, p.sampling.sample_count, p.sampling.point) == (0.6, 8, "median")
    bad = _bundle(tmp_path / "b", {"temperature": -1})
    with pytest.raises(CheckpointError, match="temperature"):
        load_predictor(PredictorConfig(model=str(bad), device="cpu"))
    plain = load_predictor(PredictorConfig(model=str(_bundle(tmp_path / "c", None)),
                                           device="cpu"))
    assert plain.sampling == SamplingDefaults()


def test_a_forecast_naming_no_settings_samples_with_the_models(tmp_path):
    tuned = load_predictor(PredictorConfig(
        model=str(_bundle(tmp_path, {"temperature": 0.5, "top_p": 1.0})), device="cpu"))
    series, x_ts, y_ts = _inputs()
    unset = tuned.forecast(series, x_ts, y_ts, ForecastOptions(4, sample_count=6, seed=11))
    named = tuned.forecast(series, x_ts, y_ts,
                           ForecastOptions(4, sample_count=6, seed=11, temperature=0.5, top_p=1.0))
    reference = tuned.forecast(series, x_ts, y_ts, ForecastOptions(
        4, sample_count=6, seed=11, temperature=1.0, top_p=0.9))
    np.testing.assert_array_equal(unset.paths, named.paths)
    assert not np.array_equal(unset.paths, reference.paths)


def test_eval_uses_the_models_settings_says_so_and_scores_its_point(tmp_path, capsys):
    from kronos_core.base.candles import FEATURES
    from kronos_core.cli import main

    rng = np.random.default_rng(1)
    n = 160
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    frame = pd.DataFrame({"timestamps": pd.date_range("2023-01-02", periods=n, freq="B"),
                          **{f: close for f in FEATURES[:4]}, "volume": 1000.0,
                          "amount": 1000.0 * close})
    csv = tmp_path / "s.csv"
    frame.to_csv(csv, index=False)
    reports = {}
    for point in ("mean", "median"):
        folder = _bundle(tmp_path / point, {"temperature": 0.9, "top_p": 1.0, "sample_count": 5,
                                            "point": point})
        out = tmp_path / f"{point}.json"
        assert main(["eval", "--data", str(csv), "--lookback", "40", "--horizon", "2",
                     "--windows", "4", "--model", str(folder), "--device", "cpu",
                     "--out", str(out)]) == 0
        text = capsys.readouterr()
        assert ("sampling settings used: 5 paths, temperature 0.9, top-p 1, point forecast the "
                f"{point}") in text.out
        reports[point] = json.loads(out.read_text())
        assert reports[point]["models"][0]["sampling"]["point"] == point
        assert reports[point]["data"]["sample_count"] == 5
    # same paths (same weights, settings and seed), another point forecast: the CRPS agrees and
    # the MAE does not
    mean, median = reports["mean"]["metrics"], reports["median"]["metrics"]
    assert mean["crps"] == pytest.approx(median["crps"])
    assert mean["mae"] != pytest.approx(median["mae"])
    # a flag wins over the model's setting
    folder = _bundle(tmp_path / "flag", {"temperature": 0.9, "sample_count": 5})
    assert main(["eval", "--data", str(csv), "--lookback", "40", "--horizon", "2", "--windows",
                 "2", "--model", str(folder), "--device", "cpu", "--sample-count", "3",
                 "--temperature", "1.1"]) == 0
    assert "3 paths, temperature 1.1" in capsys.readouterr().out


def test_tune_sampling_picks_on_windows_before_the_end_and_writes_the_choice(tmp_path, capsys):
    from kronos_core.base.candles import FEATURES
    from kronos_core.cli import main

    rng = np.random.default_rng(2)
    n = 200
    close = 20 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    stamps = pd.date_range("2022-01-03", periods=n, freq="B")
    frame = pd.DataFrame({"timestamps": stamps, **{f: close for f in FEATURES[:4]},
                          "volume": 500.0, "amount": 500.0 * close})
    csv = tmp_path / "s.csv"
    frame.to_csv(csv, index=False)
    folder = _bundle(tmp_path, None)
    end = stamps[150]
    args = ["tune-sampling", "--data", str(csv), "--lookback", "40", "--horizon", "1", "3",
            "--windows", "4", "--model", str(folder), "--device", "cpu", "--sample-count", "4",
            "--temperatures", "0.5,1.0", "--top-ps", "1.0"]
    assert main(args) == 2  # --data without --end: refused, the windows could reach eval data
    assert "--end" in capsys.readouterr().err
    assert main([*args, "--end", str(end.date()), "--write", str(folder),
                 "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    table = json.loads((tmp_path / "t.json").read_text())
    assert len(table["trials"]) == 4  # 2 temperatures x 1 top-p x (mean, median)
    best = min(table["trials"], key=lambda t: t["objective"])
    assert table["best"] == best
    assert f"chosen: temperature {best['temperature']:g}" in out
    meta = json.loads((folder / "kronos.json").read_text())
    assert meta["sampling"]["temperature"] == best["temperature"]
    assert meta["sampling"]["point"] == best["point"] and meta["sampling"]["sample_count"] == 4
    assert meta["name"] == "kronos-tiny-random"  # the rest of the manifest kept
    assert "before" in meta["sampling"]["chosen_by"]["where"]
    p = load_predictor(PredictorConfig(model=str(folder), device="cpu"))
    assert p.sampling.temperature == best["temperature"]
