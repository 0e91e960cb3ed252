"""Shared constants and the tiny training config of the training tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "kronos_core" / "data" / "real"
GOOG = REAL / "goog_daily.csv"


def tiny_overrides(out: Path, kind: str = "predictor", **extra) -> dict:
    """Dotted overrides for a model small enough to train a few steps in a second."""
    base = {
        "kind": kind, "out": str(out), "data.paths": [str(GOOG)], "data.lookback": 24,
        "data.horizon": 8, "data.stride": 16, "tokenizer.d_model": 16, "tokenizer.n_heads": 2,
        "tokenizer.ff_dim": 32, "tokenizer.n_enc_layers": 2, "tokenizer.n_dec_layers": 2,
        "tokenizer.s1_bits": 4, "tokenizer.s2_bits": 4, "model.d_model": 16, "model.n_heads": 2,
        "model.n_layers": 2, "model.ff_dim": 32, "batch_size": 8, "max_steps": 4, "eval_every": 2,
        "save_every": 2, "optim.warmup_steps": 1, "val_batches": 2, "tensorboard": False,
        "device": "cpu", "max_context": 64,
        "threads": 1,
    }
    base.update(extra)
    return base


def write_config_yaml(path: Path, overrides: dict, skip: tuple[str, ...] = ()) -> Path:
    """A training YAML at ``path`` from dotted overrides (``{"data.lookback": 32}`` becomes
    ``data: {lookback: 32}``), leaving out the keys in ``skip``."""
    import yaml

    tree: dict = {}
    for key, value in overrides.items():
        if key in skip:
            continue
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(tree))
    return path
