"""``kronos plan --mode infer --nodes N``: the series split over N nodes of ``--gpus`` devices,
the users' workload set beside their measured 8 min 23 s and 3-minute goal (issue 19)."""

from __future__ import annotations

import json

import pytest

from kronos_core.cli import main
from kronos_core.cli import plan as cli_plan
from kronos_core.plan import planner as P
from kronos_core.plan import roofline as R

SEEDS = [
    "--model", "small", "--mode", "infer", "--window", "400", "--horizon", "120", "--batch", "250",
    "--series", "1000", "--device", "a100-80gb", "--gpus", "4",
]


def _plan(capsys, *args) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_nodes_halve_the_compute_and_add_the_network(capsys):
    one = _plan(capsys, *SEEDS)
    two = _plan(capsys, *SEEDS, "--nodes", "2")
    assert one["time"]["nodes"] == 1 and two["time"]["nodes"] == 2 and two["time"]["devices"] == 8
    assert one["time"]["network"] == 0 and one["time"]["call_batch"] == 250
    # 1,000 series over 8 devices: one call of 125 each, instead of one call of 250 on 4
    assert two["time"]["call_batch"] == 125 and two["time"]["calls_per_device"] == 1
    # the windows (400 x 6 fp32) and forecasts (120 x 6 fp32) of the other node's 500 series over 10
    # GbE
    assert two["time"]["network"] == pytest.approx(500 * 6 * 4 * (400 + 120) / R.NODE_LINK)
    assert two["time"]["total"] == pytest.approx(two["time"]["per_call"] + two["time"]["network"])
    assert two["time"]["total"] < one["time"]["total"]
    tok, model = P.MODEL_PRESETS["small"][1], P.MODEL_PRESETS["small"][0]
    half = P.plan_inference(model, tok, 400, 120, 125, max_context=512)
    assert two["time"]["per_call"] == pytest.approx(
        R.infer_seconds(model, tok, half, 1000, R.DEVICES["a100-80gb"], 4, 512, nodes=2)["per_call"]
    )
    for plan in (one, two):  # beside the users' figures
        assert plan["seeds"] == {
            "measured_s": 503, "goal_s": 180, "estimate_s": plan["time"]["total"],
        }


def test_text_names_the_nodes_and_the_users_figures(capsys):
    assert main(["plan", *SEEDS, "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "4x a100-80gb on each of 2 nodes" in out and "Gb/s" in out
    assert "measured 8 min 23 s" in out and "goal 3 min" in out
    assert (
        cli_plan.seeds_comparison(
            type("A", (), {"series": 10, "batch": 4, "window": 400, "horizon": 120})(), 1.0
        )
        is None
    )  # another workload: no comparison


def test_nodes_is_checked(capsys):
    assert main(["plan", *SEEDS, "--nodes", "0"]) == 2
    assert main(["plan", "--model", "small", "--mode", "train", "--nodes", "2"]) == 2
    assert "--nodes" in capsys.readouterr().err
