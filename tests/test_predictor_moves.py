"""A model's move correction end to end: the loader reads its kronos.json ``moves`` block, the
predictor applies it before the price limits (on by default, off per call), a model folder
without the block forecasts exactly as before, and ``kronos tune-moves`` / ``kronos forecast``
fit and name it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from fixture_paths import FIXTURE_DIR

from kronos_core.base.candles import FEATURES
from kronos_core.base.moves import KAPPA_MAX, MoveCorrection, correct_moves
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import rule_for
from kronos_core.loading import PredictorConfig, load_predictor
from kronos_core.model import CheckpointError

BLOCK = {"lambda": [0.0, 0.5], "kappa": [1.5, 0.8], "windows": 12,
         "where": "windows whose truth ends before each series' eval_from"}
HOT = dict(sample_count=16, temperature=1.5, top_p=1.0, seed=7)


def _bundle(tmp_path, moves):
    folder = tmp_path / "bundle"
    shutil.copytree(FIXTURE_DIR, folder)
    meta = json.loads((folder / "kronos.json").read_text())
    assert "moves" not in meta  # the parity fixtures stay without one
    if moves is not None:
        meta["moves"] = moves
    (folder / "kronos.json").write_text(json.dumps(meta))
    return folder


def _inputs(n=60, horizon=4, last_day="2019-06-21"):
    rng = np.random.default_rng(0)
    close = 10 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    values = np.stack([close, close * 1.01, close * 0.99, close, np.full(n, 100.0),
                       close * 100], axis=1).astype(np.float32)
    stamps = pd.bdate_range(end=last_day, periods=n)
    future = pd.bdate_range(stamps[-1] + pd.Timedelta(days=1), periods=horizon)
    return [values], [stamps], [future]


@pytest.fixture(scope="module")
def predictors(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moves")
    plain = load_predictor(PredictorConfig(model=str(_bundle(tmp / "a", None)), device="cpu"))
    fitted = load_predictor(PredictorConfig(model=str(_bundle(tmp / "b", BLOCK)), device="cpu"))
    return plain, fitted


def test_the_loader_reads_the_block_and_refuses_a_bad_one(predictors, tmp_path):
    plain, fitted = predictors
    assert plain.moves is None
    assert fitted.moves is not None
    assert fitted.moves.lam == (0.0, 0.5) and fitted.moves.kappa == (1.5, 0.8)
    assert fitted.moves.source == "kronos-tiny-random's kronos.json"
    assert fitted.moves.as_dict()["windows"] == 12
    bad = _bundle(tmp_path, {"lambda": [2.0], "kappa": [1.0]})
    with pytest.raises(CheckpointError, match="lambda"):
        load_predictor(PredictorConfig(model=str(bad), device="cpu"))


def test_the_predictor_applies_it_and_a_folder_without_it_forecasts_as_before(predictors):
    plain, fitted = predictors
    series, x_ts, y_ts = _inputs()
    options = ForecastOptions(4, quantiles=(0.1, 0.9), **HOT)
    raw = plain.forecast(series, x_ts, y_ts, options)
    off = fitted.forecast(series, x_ts, y_ts, options.with_(move_correction=False))
    on = fitted.forecast(series, x_ts, y_ts, options)
    # same weights: without the block, and with it turned off, the very same forecast
    for a, b in ((raw, off),):
        np.testing.assert_array_equal(a.paths, b.paths)
        np.testing.assert_array_equal(a.mean, b.mean)
        np.testing.assert_array_equal(a.quantiles, b.quantiles)
    assert raw.moves is None and off.moves is None
    np.testing.assert_array_equal(on.moves, [[0.0, 0.5, 0.5, 0.5], [1.5, 0.8, 0.8, 0.8]])
    last = series[0][-1, 3]
    want = correct_moves(raw.paths, np.array([last]), *fitted.moves.steps(4))
    np.testing.assert_array_equal(on.paths, want)
    np.testing.assert_allclose(on.mean, on.paths.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(on.quantiles, np.quantile(on.paths, (0.1, 0.9), axis=1), rtol=1e-6)
    # step 1 (lambda 0): centred on the last close; its spread 1.5 times the raw one
    r_raw, r_on = raw.paths[0, :, :, 3] / last - 1, on.paths[0, :, :, 3] / last - 1  # (S, H)
    assert abs(r_raw[:, 0].mean()) > 1e-4
    assert r_on[:, 0].mean() == pytest.approx(0.0, abs=1e-6)
    assert r_on[:, 0].std() == pytest.approx(1.5 * r_raw[:, 0].std(), rel=1e-4)
    assert r_on[:, 2].mean() == pytest.approx(0.5 * r_raw[:, 2].mean(), rel=1e-4, abs=1e-7)


def test_the_price_limits_hold_the_corrected_paths(tmp_path):
    wide = load_predictor(PredictorConfig(
        model=str(_bundle(tmp_path, {"lambda": [1.0], "kappa": [8.0]})), device="cpu"))
    series, x_ts, y_ts = _inputs(horizon=3)
    rule = rule_for("600000.SH", {})
    options = ForecastOptions(3, **HOT)
    unheld = wide.forecast(series, x_ts, y_ts, options.with_(price_limits=False),
                           price_limits=[rule])
    held = wide.forecast(series, x_ts, y_ts, options, price_limits=[rule])
    last = float(series[0][-1, 3])
    close = held.paths[0, :, :, 3].astype(np.float64)  # (S, H)
    prev = np.concatenate([np.full((len(close), 1), last), close[:, :-1]], axis=1)
    assert np.abs(unheld.paths[0, :, 0, 3] / last - 1).max() > 0.1  # the widened paths go out
    assert np.abs(close / prev - 1).max() <= 0.1 + 1e-5  # ... and the limit holds them


def test_tune_moves_fits_on_windows_before_the_end_and_writes_the_block(tmp_path, capsys):
    from kronos_core.cli import main

    rng = np.random.default_rng(2)
    n = 220
    close = 20 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    stamps = pd.date_range("2022-01-03", periods=n, freq="B")
    frame = pd.DataFrame({"timestamps": stamps, **{f: close for f in FEATURES[:4]},
                          "volume": 500.0, "amount": 500.0 * close})
    csv = tmp_path / "s.csv"
    frame.to_csv(csv, index=False)
    folder = _bundle(tmp_path, None)
    args = ["tune-moves", "--data", str(csv), "--lookback", "40", "--horizon", "3",
            "--windows", "6", "--model", str(folder), "--device", "cpu", "--sample-count", "8"]
    assert main(args) == 2  # --data without --end: refused
    assert "--end" in capsys.readouterr().err
    assert main([*args, "--end", str(stamps[170].date()), "--write", str(folder),
                 "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    meta = json.loads((folder / "kronos.json").read_text())
    block = meta["moves"]
    assert meta["name"] == "kronos-tiny-random" and "sampling" not in meta  # the rest kept
    assert len(block["lambda"]) == len(block["kappa"]) == 3 and block["windows"] == 6
    assert block["step"] == 3  # the default: the horizon
    assert "before" in block["where"] and block["sampling"]["sample_count"] == 8
    assert all(0 <= v <= 1 for v in block["lambda"])
    for step in block["steps"]:  # moves sized right, unless the spread scale hit its cap
        if step["kappa"] < KAPPA_MAX:
            assert step["corrected_abs_return"] == pytest.approx(step["realised_abs_return"],
                                                                 rel=1e-3)
        else:
            assert step["corrected_abs_return"] <= step["realised_abs_return"]
    assert json.loads((tmp_path / "m.json").read_text())["lambda"] == block["lambda"]
    assert "| step | lambda | kappa |" in out
    p = load_predictor(PredictorConfig(model=str(folder), device="cpu"))
    assert p.moves is not None
    assert (p.moves.lam, p.moves.kappa) == (tuple(block["lambda"]), tuple(block["kappa"]))
    # kronos forecast names what it applied, and --no-move-correction says it did not
    assert main(["forecast", "--csv", str(csv), "--horizon", "2", "--model", str(folder),
                 "--device", "cpu", "--samples", "4", "--seed", "1"]) == 0
    err = capsys.readouterr().err
    assert "move correction: lambda " in err and "not applied" not in err
    assert main(["forecast", "--csv", str(csv), "--horizon", "2", "--model", str(folder),
                 "--device", "cpu", "--samples", "4", "--seed", "1", "--no-move-correction"]) == 0
    assert "(not applied: --no-move-correction)" in capsys.readouterr().err


def test_eval_applies_it_names_it_and_can_compare_without(tmp_path, capsys):
    from kronos_core.cli import main

    rng = np.random.default_rng(5)
    n = 120
    close = 30 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    frame = pd.DataFrame({"timestamps": pd.date_range("2023-01-02", periods=n, freq="B"),
                          **{f: close for f in FEATURES[:4]}, "volume": 1000.0,
                          "amount": 1000.0 * close})
    csv = tmp_path / "s.csv"
    frame.to_csv(csv, index=False)
    folder = _bundle(tmp_path, BLOCK)
    reports, texts = {}, {}
    for name, extra in (("on", []), ("off", ["--no-move-correction"])):
        out = tmp_path / f"{name}.json"
        assert main(["eval", "--data", str(csv), "--lookback", "40", "--horizon", "2",
                     "--windows", "4", "--model", str(folder), "--device", "cpu",
                     "--sample-count", "6", "--out", str(out), *extra]) == 0
        texts[name] = capsys.readouterr().out
        reports[name] = json.loads(out.read_text())
    on, off = (reports[k]["models"][0]["move_correction"] for k in ("on", "off"))
    assert on == {"applied": True, "lambda": [0.0, 0.5], "kappa": [1.5, 0.8],
                  "source": "kronos-tiny-random's kronos.json"}
    assert off["applied"] is False
    assert "move correction applied: lambda 0.000, 0.500" in texts["on"]
    assert "move correction NOT applied" in texts["off"]
    assert reports["on"]["metrics"]["crps"] != pytest.approx(reports["off"]["metrics"]["crps"])


def test_the_paths_cache_keys_on_the_correction_applied():
    from kronos_core.eval.data import Series
    from kronos_core.eval.runner import Sampling, cache_key
    from kronos_core.eval.windows import build_windows

    values, stamps, _ = _inputs(n=80)
    w = build_windows([Series("X", values[0], stamps[0], "test", {})], 40, 3, 2)
    s = Sampling(8, 1.0, 0.9, "mean", "flags")
    plain = cache_key(None, w, 3, s, 0)
    fitted = MoveCorrection((0.0, 0.5), (1.5, 0.8))
    assert cache_key(None, w, 3, s, 0, moves=fitted) != plain
    assert cache_key(None, w, 3, s, 0, moves=MoveCorrection((0.1,), (1.5,))) \
        != cache_key(None, w, 3, s, 0, moves=fitted)
    # an identity correction changes nothing, so it keys as none
    assert cache_key(None, w, 3, s, 0, moves=MoveCorrection((1.0,), (1.0,))) == plain


def test_the_bundled_default_ships_a_fitted_correction():
    from kronos_core.loading import load_checkpoints

    loaded = load_checkpoints(PredictorConfig())
    assert loaded.moves is not None and len(loaded.moves.lam) == 5
    assert loaded.moves.source == "kronos-default's kronos.json"
    assert "eval_from" in loaded.moves.about["where"] and loaded.moves.about["windows"] >= 100
