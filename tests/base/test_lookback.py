"""Horizon and lookback rules (``kronos_core.base.lookback``), shared by the service and the CLI:
a horizon past the model's context is refused before any work, the default lookback follows
a loaded calibration, and a cut history is named with both lengths (issue 26, items 1, 2, 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY

from kronos_core.base.lookback import (
    HorizonTooLong,
    Lookback,
    calibration_lookback,
    check_horizon,
    choose_lookback,
    history_cut_message,
)
from kronos_core.base.options import ForecastOptions
from kronos_core.calibration.scope import Scope
from kronos_core.engine.config import GenerationConfig


def test_a_horizon_past_the_context_is_refused_naming_the_limit():
    check_horizon(256, 256)  # the whole context: fine
    with pytest.raises(HorizonTooLong, match=r"horizon 300 .*max_context 256.*at most 256"):
        check_horizon(300, 256)
    with pytest.raises(HorizonTooLong, match="max_context 256"):
        GenerationConfig(horizon=300, max_context=256)


def test_the_predictor_refuses_before_tokenizing(monkeypatch):
    """``KronosPredictor.forecast`` with a horizon past the context raises at once: the engine
    never tokenizes (before, the tokens were generated and the reshape failed after them)."""
    from kronos_core.loading import PredictorConfig, load_predictor

    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu", max_context=16))
    monkeypatch.setattr(predictor.generator.tokenizer, "encode",
                        lambda *a, **k: pytest.fail("tokenized a forecast it must refuse"))
    ts = pd.date_range("2024-01-01", periods=20, freq="D")
    future = pd.date_range("2024-01-21", periods=17, freq="D")
    values = np.full((20, 6), 10.0, np.float32)
    with pytest.raises(HorizonTooLong, match="horizon 17 .*max_context 16"):
        predictor.forecast([values], [ts], [future], ForecastOptions(horizon=17))


def test_default_lookback_is_context_minus_horizon_or_the_calibrations():
    default = choose_lookback(None, 200, 256)
    assert default == Lookback(56, "default", default.note)
    assert choose_lookback(None, 256, 256).value == 2
    assert choose_lookback(80, 5, 256).source == "request"
    cal = {"method": "cqr", "levels": [0.8], "horizon": 5, "features": ["close"],
           "scope": Scope((200, 200), ("1d",), None).to_dict()}
    chosen = choose_lookback(None, 5, 256, cal)
    assert (chosen.value, chosen.source) == (200, "calibration")
    assert "fitted lookback 200" in chosen.note
    assert choose_lookback(100, 5, 256, cal).value == 100  # asked wins
    assert calibration_lookback({**cal, "scope": Scope().to_dict()}) is None  # unrecorded: default
    grouped = {"groups": {"1d": {**cal, "scope": Scope((150, 220)).to_dict()},
                          "1h": {**cal, "scope": Scope((100, 200)).to_dict()}}}
    assert calibration_lookback(grouped) == 200  # the longest inside every group's range


def test_history_cut_only_when_the_lookback_asked_is_cut():
    default = choose_lookback(None, 200, 256)
    assert history_cut_message(56, 5000, default) is None  # the model's window: nothing to say
    assert history_cut_message(40, 40, default) is None
    fitted = choose_lookback(None, 5, 256, {"scope": Scope((200, 200), ("1d",), None).to_dict()})
    assert fitted.source == "calibration" and history_cut_message(100, 5000, fitted) is None
    asked = choose_lookback(100, 5, 256)
    assert history_cut_message(100, 5000, asked) is None  # what was asked
    msg = history_cut_message(40, 40, asked)
    assert "40 candles" in msg and "lookback 100 asked" in msg and "holds 40" in msg


def test_kronos_forecast_refuses_a_horizon_past_the_context_before_forecasting(capsys, monkeypatch):
    from kronos_core.cli import main
    from kronos_core.data.sample_store import REAL_DIR
    from kronos_core.predictor import KronosPredictor

    monkeypatch.setattr(
        KronosPredictor, "forecast", lambda *a, **k: pytest.fail("forecast started")
    )
    csv = str(REAL_DIR / "goog_daily.csv")
    argv = ["forecast", "--model", TINY, "--max-context", "64", "--csv", csv,
            "--horizon", "65"]
    assert main(argv) == 2
    assert (
        "horizon 65 is longer than the model's context (max_context 64)" in capsys.readouterr().err
    )
