"""``kronos train default``: the bundled default model, trained on the bundled real candles only.

Two runs from ``configs/default-tokenizer.yaml`` and ``configs/default-predictor.yaml``:
the tokenizer first, then the predictor on that frozen tokenizer. The best
weights of each are copied to ``OUT/tokenizer`` and ``OUT/model`` with
``OUT/kronos.json`` (name, max_context, how it was trained). Run folders (with
optimiser state for ``--resume``) go to ``--work`` (default ``runs/kronos-default``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

from kronos_core.train.config import load_config

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
REAL_DATA = HERE.parent / "data" / "real"
DEFAULT_OUT = HERE.parent / "assets" / "models" / "kronos-default"
SUMMARY = "summary.json"
COMMAND = "kronos train default --out kronos_core/assets/models/kronos-default"


def _phase(kind: str, args: argparse.Namespace, work: Path, extra: dict) -> dict:
    """Run one phase unless a finished summary is there (with --resume); returns its summary."""
    from kronos_core.train.trainer import train

    out = work / kind
    done = out / SUMMARY
    if getattr(args, "resume", False) and done.is_file():
        log.info("default model: %s phase already finished (%s)", kind, done)
        return json.loads(done.read_text())
    overrides = {
        "out": str(out), "data.paths": getattr(args, "data", None) or [str(REAL_DATA)],
        "max_steps": getattr(args, "max_steps", None), "seed": getattr(args, "seed", None),
        "threads": getattr(args, "threads", None), "device": getattr(args, "device", None), **extra,
    }
    cfg = load_config(CONFIGS / f"default-{kind}.yaml", overrides)
    resume = bool(getattr(args, "resume", False)) and (out / "last" / "trainer_state.pt").is_file()
    summary = train(cfg, resume=resume)
    summary["config"] = str(out / "config.yaml")
    done.write_text(json.dumps(summary, indent=2))
    return summary


def train_default(args: argparse.Namespace) -> dict:
    out = Path(getattr(args, "out", None) or DEFAULT_OUT)
    work = Path(getattr(args, "work", None) or "runs/kronos-default")
    tok_summary = _phase("tokenizer", args, work, {})
    tok_dir = work / "tokenizer" / "best" / "tokenizer"
    pred_summary = _phase("predictor", args, work, {"tokenizer_init": str(tok_dir)})
    best = work / "predictor" / "best"
    out.mkdir(parents=True, exist_ok=True)
    for part in ("model", "tokenizer"):
        shutil.rmtree(out / part, ignore_errors=True)
        shutil.copytree(best / part, out / part)
    cfg = load_config(CONFIGS / "default-predictor.yaml")
    info = {
        "name": cfg.name, "max_context": cfg.max_context, "command": COMMAND,
        "seed": getattr(args, "seed", None) or cfg.seed, "data": sorted(p.name for p in REAL_DATA.glob("*.csv")),
        "tokenizer_val_loss": tok_summary.get("best_val_loss"),
        "predictor_val_loss": pred_summary.get("best_val_loss"),
        "tokenizer_steps": tok_summary.get("steps"), "predictor_steps": pred_summary.get("steps"),
    }
    (out / "kronos.json").write_text(json.dumps(info, indent=2))
    return {"out": str(out), **info}
