"""The move correction in the service: a replica loaded from a model folder with a kronos.json
``moves`` block describes it (``/v1/models``), the gateway passes a request's
``move_correction`` to the replica and each answer names the values its paths got."""

from __future__ import annotations

import asyncio
import json
import shutil

import orjson
from fixture_paths import FIXTURE_DIR
from service_fakes import FakeReplicas, fake_gateway, fake_info

from service.common.schemas import ForecastRequest, ModelsResponse
from service.common.settings import Settings
from service.replica.deployment import Predictor

BLOCK = {"lambda": [0.1, 0.3], "kappa": [1.2, 1.1], "windows": 150,
         "where": "windows whose truth ends before each series' eval_from",
         "fitted_at": "2026-12-07T06:00:00Z"}


def _bundle(tmp_path, moves):
    folder = tmp_path / "bundle"
    shutil.copytree(FIXTURE_DIR, folder)
    meta = json.loads((folder / "kronos.json").read_text())
    if moves is not None:
        meta["moves"] = moves
    (folder / "kronos.json").write_text(json.dumps(meta))
    return folder


def _replica_model(tmp_path, moves) -> dict:
    """The model description a real replica (tiny model, on the CPU) gives the gateway."""
    front = Predictor.func_or_class(Settings(model_dir=str(_bundle(tmp_path, moves)),
                                             device="cpu"))
    return front.core.model


def _models_route(model: dict) -> dict:
    """GET /v1/models through the real route, over a replica describing ``model``."""
    from test_app import FakeHandle, _ingress

    handle = FakeHandle(lambda shard: None)
    info = fake_info(max_context=64)
    info.model = model
    handle.describe.answer = lambda: info
    ing = _ingress(handle)
    resp = asyncio.run(ing.models())
    assert resp.status_code == 200
    body = orjson.loads(resp.body)
    ModelsResponse.model_validate(body)  # the documented schema holds it
    return body["models"][0]


def test_v1_models_shows_the_fitted_values_and_none_without_them(tmp_path):
    model = _models_route(_replica_model(tmp_path / "a", BLOCK))
    moves = model["moves"]
    assert moves["lambda"] == [0.1, 0.3] and moves["kappa"] == [1.2, 1.1]
    assert moves["windows"] == 150 and "eval_from" in moves["fitted_on"]
    assert moves["fitted_at"] == "2026-12-07T06:00:00Z"
    assert moves["source"] == "kronos-tiny-random's kronos.json"
    assert _models_route(_replica_model(tmp_path / "b", None))["moves"] is None


def _answer(moves, **kw):
    info = fake_info()
    info.model = {**info.model, "moves": moves}
    replicas = FakeReplicas(info=info)
    gw, _, reps = fake_gateway(replicas)
    req = ForecastRequest(symbols=["S000", "S001"], horizon=3, lookback=20, **kw)
    return asyncio.run(gw.forecast(req)), reps.runner.predictor


def test_each_answer_names_the_correction_and_the_replica_is_told():
    model = {"lambda": [0.1, 0.3], "kappa": [1.2, 1.1], "source": "m's kronos.json"}
    out, predictor = _answer(model)
    assert out.move_correction == {"applied": True, "lambda": [0.1, 0.3, 0.3],
                                   "kappa": [1.2, 1.1, 1.1], "source": "m's kronos.json"}
    assert predictor.options and all(o.move_correction for o in predictor.options)
    off, predictor = _answer(model, move_correction=False)
    assert off.move_correction["applied"] is False
    assert predictor.options and not any(o.move_correction for o in predictor.options)
    none, _ = _answer(None)
    assert none.move_correction is None
