"""Training techniques, each against a plain reference: accumulation, checkpointing, precision,
clipping, schedule, early stopping, seeds, OOM back-off."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from kronos_core.train.losses import predictor_loss, tokenizer_loss
from kronos_core.train.techniques import enable_block_checkpointing, warmup_cosine
from kronos_core.train.trainer import Trainer


def _first_batch(trainer: Trainer) -> dict:
    from kronos_core.train.data import make_loader

    return next(iter(make_loader(trainer.train_set, trainer.sampler, 0)))


def _params(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("kind", ["predictor", "tokenizer"])
def test_accumulation_equals_one_big_batch(tiny_config, tmp_path, kind):
    # The tokenizer's codebook entropy is a batch statistic (entropy of the batch-mean
    # assignment), so it is exact per micro-batch only; zeta 0 leaves the per-sample terms.
    extra = {"tokenizer.zeta": 0.0} if kind == "tokenizer" else {}
    big = Trainer(tiny_config(kind, out=tmp_path / "a", accum_steps=1, **extra))
    acc = Trainer(tiny_config(kind, out=tmp_path / "b", accum_steps=4, **extra))
    batch = _first_batch(big)
    rec_big, rec_acc = big.train_step(batch), acc.train_step(batch)
    assert acc.micro_batch_size == 2 and big.micro_batch_size == 8
    assert rec_big["loss"] == pytest.approx(rec_acc["loss"], rel=1e-5)
    for a, b in zip(_params(big.trainable), _params(acc.trainable)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_checkpointing_gives_the_same_gradients(tiny_config, tmp_path):
    trainer = Trainer(tiny_config("predictor", out=tmp_path / "a"))
    plain, tok = trainer.model, trainer.tok
    ckpt = copy.deepcopy(plain)
    enable_block_checkpointing(ckpt.transformer)
    batch = _first_batch(trainer)
    for m in (plain, ckpt):
        predictor_loss(m, tok, batch["x"], batch["stamp"]).loss.backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert ckpt.state_dict().keys() == plain.state_dict().keys()  # the layout does not change


def test_tokenizer_checkpointing_gives_the_same_gradients():
    from kronos_core.model import KronosTokenizer, TokenizerConfig

    torch.manual_seed(0)
    tok = KronosTokenizer(TokenizerConfig(d_in=6, d_model=16, n_heads=2, ff_dim=32, n_enc_layers=3,
                                          n_dec_layers=3, s1_bits=4, s2_bits=4))
    ckpt = copy.deepcopy(tok)
    enable_block_checkpointing(ckpt.encoder)
    enable_block_checkpointing(ckpt.decoder)
    x = torch.randn(2, 12, 6)
    for m in (tok, ckpt):
        tokenizer_loss(m, x).loss.backward()
    for a, b in zip(tok.parameters(), ckpt.parameters()):
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


def test_bf16_autocast_runs_in_bfloat16_and_stays_close(tiny_config, tmp_path):
    fp32 = Trainer(tiny_config(out=tmp_path / "a"))
    bf16 = Trainer(tiny_config(out=tmp_path / "b", precision="bf16"))
    seen = []
    bf16.model.head.proj_s1.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    batch = _first_batch(fp32)
    a, b = fp32.train_step(batch)["loss"], bf16.train_step(batch)["loss"]
    assert seen and seen[0] == torch.bfloat16
    assert math.isfinite(b) and b == pytest.approx(a, rel=0.03)


def test_fp16_needs_cuda(tiny_config, tmp_path):
    if torch.cuda.is_available():
        trainer = Trainer(tiny_config(out=tmp_path / "a", precision="fp16", device="cuda"))
        assert trainer.scaler is not None
        assert math.isfinite(trainer.train_step(_first_batch(trainer))["loss"])
    else:
        with pytest.raises(ValueError, match="CUDA"):
            Trainer(tiny_config(out=tmp_path / "a", precision="fp16")).train_step(
                _first_batch(Trainer(tiny_config(out=tmp_path / "b"))))


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step")  # the test wraps optimizer.step
def test_gradients_are_clipped(tiny_config, tmp_path):
    trainer = Trainer(tiny_config(out=tmp_path / "a", **{"optim.grad_clip": 1e-3}))
    norms = []
    original = trainer.optimizer.step

    def step(*args, **kwargs):  # counts the norm the optimiser sees
        grads = [p.grad for p in trainer.trainable.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return original(*args, **kwargs)

    trainer.optimizer.step = step
    record = trainer.train_step(_first_batch(trainer))
    assert record["grad_norm"] > 1e-2  # the raw norm was well above the limit
    assert norms[0] == pytest.approx(1e-3, rel=1e-3)


def test_warmup_then_cosine_schedule(tiny_config, tmp_path):
    assert warmup_cosine(0, 4, 20, 0.1) == pytest.approx(0.25)
    assert warmup_cosine(3, 4, 20, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(20, 4, 20, 0.1) == pytest.approx(0.1)
    values = [warmup_cosine(s, 4, 20, 0.1) for s in range(4, 21)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    trainer = Trainer(
        tiny_config(out=tmp_path / "a", max_steps=6, **{"optim.warmup_steps": 2, "optim.lr": 0.01})
    )
    trainer.fit()
    lrs = [r["lr"] for r in trainer.history]
    expected = [0.01 * warmup_cosine(s, 2, 6, 0.1) for s in range(6)]
    assert lrs == pytest.approx(expected)


def test_early_stopping_on_validation_loss(tiny_config, tmp_path):
    # lr 0: the validation loss never improves after the first evaluation
    trainer = Trainer(tiny_config(out=tmp_path / "a", max_steps=20, early_stopping_patience=2,
                                  **{"optim.lr": 0.0}))
    summary = trainer.fit()
    assert summary["stopped_early"] and summary["steps"] == 6  # evaluations at 2 (best), 4, 6
    assert (tmp_path / "a" / "best" / "model" / "model.safetensors").is_file()


def test_seeds_make_runs_repeatable(tiny_config, tmp_path):
    def losses(seed, name):
        t = Trainer(tiny_config(out=tmp_path / name, max_steps=3, seed=seed,
                                **{"model.resid_dropout_p": 0.2}))
        t.fit()
        return [r["loss"] for r in t.history]

    first = losses(1, "a")
    assert losses(1, "b") == first
    assert losses(2, "c") != first


def test_out_of_memory_halves_the_micro_batch_and_keeps_the_update(
    tiny_config, tmp_path, monkeypatch
):
    ref = Trainer(tiny_config(out=tmp_path / "ref"))
    oom = Trainer(tiny_config(out=tmp_path / "oom"))
    forward = type(oom.objective).forward

    def limited(self, x, stamp):
        if x.shape[0] > 2:
            raise RuntimeError(
                "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"
            )
        return forward(self, x, stamp)

    batch = _first_batch(ref)
    expected = ref.train_step(batch)
    monkeypatch.setattr(type(oom.objective), "forward", limited)
    got = oom.train_step(batch)
    assert (got["micro_batch"], got["accum"]) == (2, 4)
    assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)
    for a, b in zip(_params(ref.trainable), _params(oom.trainable)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_other_errors_are_not_taken_for_oom(tiny_config, tmp_path, monkeypatch):
    trainer = Trainer(tiny_config(out=tmp_path / "a"))

    def broken(self, x, stamp):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(type(trainer.objective), "forward", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        trainer.train_step(_first_batch(trainer))


def test_auto_batch_size_asks_the_planner(tiny_config, tmp_path, monkeypatch):
    from kronos_core.plan import planner

    asked = {}

    def largest_batch(**kwargs):
        asked.update(kwargs)
        return 4

    monkeypatch.setattr(planner, "largest_batch", largest_batch)
    trainer = Trainer(tiny_config(out=tmp_path / "a", batch_size="auto", accum_steps=2))
    # planner's micro-batch x accumulation
    assert trainer.batch_size == 8 and trainer.micro_batch_size == 4
    assert asked["window"] == 32 and asked["mode"] == "train" and asked["model"] is trainer.model


def test_auto_batch_size_falls_back_when_the_planner_cannot_answer(
    tiny_config, tmp_path, monkeypatch
):
    from kronos_core.plan import planner

    def broken(**kwargs):
        raise NotImplementedError("tokenizer training is not planned")

    monkeypatch.setattr(planner, "largest_batch", broken)
    trainer = Trainer(tiny_config("tokenizer", out=tmp_path / "a", batch_size="auto"))
    assert 1 <= trainer.batch_size <= len(trainer.train_set)
