"""The move correction over real HTTP (the real service, the bundled default model, which ships a
fitted ``moves`` block): ``/v1/models`` shows the values, an answer names the ones its paths got,
and ``move_correction: false`` gives the model's paths as sampled and says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def _rows(n: int = 120) -> list[list]:
    stamps = pd.bdate_range(end="2024-06-21", periods=n)
    close = 50 * np.exp(np.cumsum(np.random.default_rng(4).normal(0, 0.015, n)))
    return [[str(t.date()), float(c), float(c * 1.01), float(c * 0.99), float(c), 1e6]
            for t, c in zip(stamps, close)]


def test_models_show_it_and_answers_name_it(live_service):
    c = live_service.client
    moves = c.get("/v1/models").json()["models"][0]["moves"]
    assert len(moves["lambda"]) == len(moves["kappa"]) == 5 and moves["windows"] > 100
    assert "eval_from" in moves["fitted_on"] and moves["source"] == "kronos-default's kronos.json"
    body = {"series": [{"symbol": "MSFT", "candles": _rows()}], "horizon": 7,
            "sample_count": 16, "seed": 3, "return_paths": True}
    on = c.post("/v1/forecast", json=body)
    assert on.status_code == 200, on.text
    named = on.json()["move_correction"]
    assert named["applied"] is True
    assert named["lambda"] == [*moves["lambda"], moves["lambda"][-1], moves["lambda"][-1]]
    assert named["kappa"][:5] == moves["kappa"]
    off = c.post("/v1/forecast", json={**body, "move_correction": False}).json()
    assert off["move_correction"]["applied"] is False
    paths_on = np.array([p["close"] for p in on.json()["forecasts"][0]["paths"]])  # (S, H)
    paths_off = np.array([p["close"] for p in off["forecasts"][0]["paths"]])
    assert not np.allclose(paths_on, paths_off)  # the same draws, corrected or not
