"""Planner: exact parameter counts, memory within ±20% of measured CPU peaks, recommendations.

Measured peaks come from ``kronos_core.plan.measure`` (every live tensor
storage, model and optimizer included, via ``LiveTensorMeter``). The quick
cases use small vocabularies (8 bits) so the blocks, not the heads, carry the
activations; ``-m slow`` runs the published 10-bit cases of
``kronos plan --measure-cpu``.
"""

from __future__ import annotations

import json

import pytest

from kronos_core.cli import main
from kronos_core.engine.memory import count_parameters
from kronos_core.plan import measure as C
from kronos_core.plan import planner as P
from kronos_core.plan import roofline as R

QUICK_TRAIN = [
    C.TrainCase(64, 2, 4, 128, 4, 32, bits=8),
    C.TrainCase(64, 3, 4, 192, 4, 48, checkpointing=True, bits=8),
    C.TrainCase(64, 2, 4, 128, 4, 32, precision="bf16", bits=8),
]
QUICK_INFER = [
    C.InferCase(64, 2, 4, 128, 4, 64, 8, bits=8, tok_d_model=32),
    C.InferCase(64, 2, 4, 128, 2, 48, 6, samples=2, bits=8, tok_d_model=32),
    C.InferCase(96, 1, 4, 192, 6, 40, 5, bits=8, tok_d_model=32),
]


def test_parameter_counts_match_published_checkpoints():
    published = {"mini": 4_108_032, "small": 24_741_376, "base": 102_310_592}
    for name, count in published.items():
        assert count_parameters(P.resolve_model(name).model).total == count


@pytest.mark.parametrize("case", QUICK_TRAIN, ids=lambda c: c.label())
def test_training_memory_within_20_percent(case):
    row = C.compare_train(case)
    assert abs(row["memory_error"]) <= 0.20, row


@pytest.mark.parametrize("case", QUICK_INFER, ids=lambda c: c.label())
def test_inference_memory_within_20_percent(case):
    row = C.compare_infer(case)
    assert abs(row["memory_error"]) <= 0.20, row


@pytest.mark.slow
@pytest.mark.parametrize("case", C.TRAIN_CASES + C.INFER_CASES, ids=lambda c: c.label())
def test_measured_cases_within_20_percent(case):
    row = C.compare_train(case) if isinstance(case, C.TrainCase) else C.compare_infer(case)
    assert abs(row["memory_error"]) <= 0.20, row


def test_training_plan_parts_and_levers():
    cfg, tok, _ = P.MODEL_PRESETS["small"]
    plan = P.plan_training(cfg, tok, 512, 32)
    n = count_parameters(cfg).trainable
    assert plan.parameters == plan.gradients == 4 * n and plan.optimizer == 8 * n
    assert plan.total == plan.total_without_checkpointing > plan.total_with_checkpointing
    assert plan.activations_checkpointing < plan.activations_no_checkpointing / 3
    bf16 = P.plan_training(cfg, tok, 512, 32, precision="bf16")
    assert bf16.activations < plan.activations and bf16.autocast_cache > 0
    assert P.plan_training(cfg, tok, 512, 64).activations == 2 * plan.activations
    ddp = P.plan_training(cfg, tok, 512, 32, gpus=2)
    assert ddp.total == plan.total + ddp.ddp_buckets and ddp.ddp_buckets == plan.gradients
    assert P.plan_training(cfg, tok, 512, 32, accumulation=4).total == plan.total + plan.gradients


def test_max_train_batch_inverts_the_plan():
    cfg, tok, _ = P.MODEL_PRESETS["mini"]
    budget = 8 * 2**30
    b = P.max_train_batch(budget, cfg, tok, 256, "bf16", True)
    assert b > 0
    assert P.plan_training(cfg, tok, 256, b, "bf16", True).total <= budget
    assert P.plan_training(cfg, tok, 256, b + 1, "bf16", True).total > budget
    assert P.max_train_batch(2**20, cfg, tok, 256) == 0
    # the adapter the training loop calls, with live modules' configs and an explicit budget
    assert P.largest_batch(cfg, tok, "train", 256, "bf16", True, budget_bytes=budget) == b


def test_folder_model_loads_its_config(tmp_path):
    cfg, tok, _ = P.MODEL_PRESETS["mini"]
    (tmp_path / "model").mkdir()
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({**cfg.to_dict(), "n_layers": 2}))
    (tmp_path / "tokenizer" / "config.json").write_text(json.dumps(tok.to_dict()))
    (tmp_path / "kronos.json").write_text(json.dumps({"max_context": 1024}))
    resolved = P.resolve_model(str(tmp_path))
    assert (
        resolved.model.n_layers == 2 and resolved.tokenizer == tok and resolved.max_context == 1024
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        P.resolve_model(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="not one of"):
        P.resolve_model("huge")
    with pytest.raises(ValueError, match="is a tokenizer config"):
        P.resolve_model(str(tmp_path / "tokenizer"))
    alone = P.resolve_model(str(tmp_path / "model"), tokenizer=str(tmp_path / "tokenizer"))
    assert alone.model.n_layers == 2 and alone.tokenizer == tok


def _plan_json(capsys, *args) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_recommends_batch_accumulation_or_device(capsys):
    fits = _plan_json(
        capsys, "--model", "small", "--window", "512", "--batch", "32", "--device", "a100-80gb"
    )
    assert (
        fits["recommendation"]["fits"] is True
        and fits["recommendation"]["largest_micro_batch"] >= 32
    )
    assert fits["time"]["total"] > 0
    tight = _plan_json(
        capsys, "--model", "small", "--window", "512", "--batch", "1024", "--device", "rtx3080"
    )
    rec = tight["recommendation"]
    assert rec["fits"] is False and rec["accumulation"] >= 2
    assert rec["micro_batch"] * rec["accumulation"] >= 1024
    micro_plan = P.plan_training(
        *P.MODEL_PRESETS["small"][:2], 512, rec["micro_batch"], checkpointing=rec["checkpointing"],
        accumulation=rec["accumulation"],
    )
    assert micro_plan.total <= R.DEVICES["rtx3080"].usable_bytes
    none = _plan_json(
        capsys, "--model", "base", "--window", "512", "--batch", "8", "--device", "1GiB"
    )
    assert none["recommendation"]["fits"] is False and "h200" in none["recommendation"]["devices"]
    assert "time" not in none  # a bare byte budget has no speed figures


def test_cli_inference_breakdown_and_time(capsys):
    one = _plan_json(
        capsys, "--model", "small", "--mode", "infer", "--window", "400", "--horizon", "120",
        "--batch", "250", "--series", "1000", "--device", "a100-80gb",
    )
    four = _plan_json(
        capsys, "--model", "small", "--mode", "infer", "--window", "400", "--horizon", "120",
        "--batch", "250", "--series", "1000", "--device", "a100-80gb", "--gpus", "4",
    )
    plan = one["plan"]
    # one key/value pair per layer (8) vs the s2 head's one
    assert plan["kv_cache"] == 8 * plan["s2_cache"]
    caches = plan["kv_cache"] + plan["s2_cache"]
    assert plan["peak_phase"] in ("prefill", "sample", "recompute") and plan["caches_at_peak"]
    assert plan["total"] == plan["weights"] + plan["inputs"] + caches + plan["working_set"]
    assert four["time"]["total"] == pytest.approx(one["time"]["total"] / 4)
    assert main(["plan", "--device", "tpu9"]) == 2
    text_code = main(
        ["plan", "--model", "small", "--mode", "infer", "--batch", "4", "--device", "h200"]
    )
    out = capsys.readouterr().out
    assert text_code == 0 and "s2-head caches" in out and "KV caches" in out and "≈" in out


# --calibrate-cpu: the older spelling
@pytest.mark.parametrize("flag", ["--measure-cpu", "--calibrate-cpu"])
def test_measure_cpu_flag_runs_the_measurement(flag, monkeypatch):
    calls = []
    monkeypatch.setattr(C, "measure_cpu", lambda as_json=False: calls.append(as_json) or 0)
    assert main(["plan", flag, "--json"]) == 0 and calls == [True]
