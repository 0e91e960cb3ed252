"""Build or load the tokenizer and predictor a run starts from, and save them in the published layout."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig
from kronos_core.train.config import TrainConfig

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "models"
KRONOS_JSON = "kronos.json"


def new_tokenizer(cfg: TrainConfig) -> KronosTokenizer:
    return KronosTokenizer(TokenizerConfig(d_in=6, **cfg.tokenizer.model_dump()))


def new_model(cfg: TrainConfig, tok: KronosTokenizer) -> Kronos:
    bits = {"s1_bits": tok.config.s1_bits, "s2_bits": tok.config.s2_bits}
    return Kronos(KronosConfig(**bits, **cfg.model.model_dump()))


def _bundled_tokenizer() -> Path | None:
    for folder in (ASSETS / "kronos-default" / "tokenizer",):
        if (folder / "config.json").is_file():
            return folder
    return None


def _load_pair(init: str, tokenizer_init: str | None) -> tuple[Kronos, KronosTokenizer]:
    """(model, tokenizer) from ``init``: a run/output folder with model/ and tokenizer/, a model folder, or a Hub id."""
    try:  # the shared loader knows aliases and Hub ids; fall back to plain folders without it
        from kronos_core.loading import PredictorConfig, load_checkpoints
    except ImportError:
        pass
    else:
        loaded = load_checkpoints(PredictorConfig(model=init, tokenizer=tokenizer_init, device="cpu"))
        return loaded.model, loaded.tokenizer
    root = Path(init)
    if (root / "model").is_dir():
        tok_src = tokenizer_init or root / "tokenizer"
        return Kronos.from_pretrained(root / "model"), KronosTokenizer.from_pretrained(tok_src)
    if tokenizer_init is None:
        raise ValueError(f"init {init} is a single model; give tokenizer_init (--tokenizer) too")
    return Kronos.from_pretrained(init), KronosTokenizer.from_pretrained(tokenizer_init)


def build_modules(cfg: TrainConfig) -> tuple[KronosTokenizer, Kronos]:
    """The run's starting (tokenizer, model).

    ``init`` loads both; else a predictor run takes ``tokenizer_init`` (or the
    bundled default tokenizer) and a new model of ``cfg.model`` size; a tokenizer
    run makes a new tokenizer of ``cfg.tokenizer`` size (and a new model to ship beside it).
    """
    if cfg.init:
        model, tok = _load_pair(cfg.init, cfg.tokenizer_init)
        return tok, model
    if cfg.kind == "tokenizer":
        tok = new_tokenizer(cfg)
        return tok, new_model(cfg, tok)
    source = cfg.tokenizer_init or _bundled_tokenizer()
    if source is None:
        log.warning("no tokenizer given and none bundled: training against an untrained tokenizer")
        tok = new_tokenizer(cfg)
    else:
        tok = KronosTokenizer.from_pretrained(source)
        log.info("predictor run uses the tokenizer at %s (frozen)", source)
    return tok, new_model(cfg, tok)


def save_pair(folder: Path, model: Kronos, tok: KronosTokenizer, cfg: TrainConfig, extra: dict | None = None) -> None:
    """``folder/model``, ``folder/tokenizer`` (published layout) and ``folder/kronos.json``."""
    model.save_pretrained(folder / "model")
    tok.save_pretrained(folder / "tokenizer")
    info = {"name": cfg.name, "max_context": cfg.max_context, "kind": cfg.kind, **(extra or {})}
    (folder / KRONOS_JSON).write_text(json.dumps(info, indent=2, sort_keys=True))
