"""Shared constants and the tiny training config of the training tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "kronos_core" / "data" / "real"
GOOG = REAL / "goog_daily.csv"


def tiny_overrides(out: Path, kind: str = "predictor", **extra) -> dict:
    """Dotted overrides for a model small enough to train a few steps in a second."""
    base = {
        "kind": kind, "out": str(out), "data.paths": [str(GOOG)], "data.lookback": 24, "data.horizon": 8,
        "data.stride": 16, "tokenizer.d_model": 16, "tokenizer.n_heads": 2, "tokenizer.ff_dim": 32,
        "tokenizer.n_enc_layers": 2, "tokenizer.n_dec_layers": 2, "tokenizer.s1_bits": 4,
        "tokenizer.s2_bits": 4, "model.d_model": 16, "model.n_heads": 2, "model.n_layers": 2,
        "model.ff_dim": 32, "batch_size": 8, "max_steps": 4, "eval_every": 2, "save_every": 2,
        "optim.warmup_steps": 1, "val_batches": 2, "tensorboard": False, "device": "cpu", "max_context": 64,
        "threads": 1,
    }
    base.update(extra)
    return base
