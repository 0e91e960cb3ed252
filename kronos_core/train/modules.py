"""Build or load the tokenizer and predictor a run starts from, and save them in the published
layout."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig
from kronos_core.train.config import FINE_TUNE_LR, TrainConfig

# Fields a run may change on a loaded checkpoint: they shape training, not the weights.
# Every other field of a section (sizes, bit widths, group size) is the checkpoint's.
TRAINING_ONLY_FIELDS = ("ffn_dropout_p", "attn_dropout_p", "resid_dropout_p", "token_dropout_p",
                        "beta", "gamma0", "gamma", "zeta")

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


def _load_pair(init: str, tokenizer_init: str | None) -> tuple[Kronos, KronosTokenizer, int]:
    """(model, tokenizer, context) from ``init``: an alias, a run/output folder with model/ and
    tokenizer/, a model folder, or a Hub id; the context is the one the checkpoint was trained
    with."""
    from kronos_core.loading import PredictorConfig, load_checkpoints

    loaded = load_checkpoints(PredictorConfig(model=init, tokenizer=tokenizer_init, device="cpu"))
    return loaded.model, loaded.tokenizer, loaded.max_context


def load_init_model(init: str, tokenizer_init: str | None) -> Kronos:
    """The predictor weights ``init`` names, read again (the forecasting check's fallback)."""
    return _load_pair(init, tokenizer_init)[0]


def _with_training_fields(module, section, loaded_from: str):
    """``module`` rebuilt with the training-only fields the user set in ``section`` (same weights);
    size fields the user set that differ from the checkpoint's are ignored with a warning."""
    current = module.config
    changes, ignored = {}, []
    for name in section.model_fields_set:
        wanted, has = getattr(section, name), getattr(current, name)
        if wanted == has:
            continue
        if name in TRAINING_ONLY_FIELDS:
            changes[name] = wanted
        else:
            ignored.append(f"{name}={wanted!r} (checkpoint: {has!r})")
    if ignored:
        log.warning(
            "%s keeps the architecture of %s; ignored: %s", type(module).__name__, loaded_from,
            ", ".join(sorted(ignored)),
        )
    if not changes:
        return module
    rebuilt = type(module)(dataclasses.replace(current, **changes))
    rebuilt.load_state_dict(module.state_dict())
    log.info("%s from %s trains with %s", type(module).__name__, loaded_from, changes)
    return rebuilt


def config_as_run(cfg: TrainConfig, tok: KronosTokenizer, model: Kronos,
                  checkpoint_context: int | None) -> TrainConfig:
    """``cfg`` with what the run really uses: the sections of the modules it trains (a loaded
    checkpoint's sizes and dropout, not the defaults) and, for a run from a checkpoint, the
    checkpoint's context unless ``max_context`` was given. This is what ``config.yaml`` and
    ``kronos.json`` record. A run from a checkpoint without ``optim.lr`` trains at
    ``FINE_TUNE_LR``."""
    update: dict = {
        "tokenizer": cfg.tokenizer.model_validate(
            {k: getattr(tok.config, k) for k in type(cfg.tokenizer).model_fields}
        ),
        "model": cfg.model.model_validate(
            {k: getattr(model.config, k) for k in type(cfg.model).model_fields}
        ),
    }
    if cfg.init and "lr" not in cfg.optim.model_fields_set:
        update["optim"] = cfg.optim.model_copy(update={"lr": FINE_TUNE_LR})
        log.info("from the checkpoint %s: learning rate %g (the fine-tuning default; --lr sets "
                 "another)", cfg.init, FINE_TUNE_LR)
    context = cfg.max_context
    if checkpoint_context is not None and "max_context" not in cfg.model_fields_set:
        context = update["max_context"] = checkpoint_context
    if cfg.kind == "predictor" and cfg.data.window > context + 1:
        raise ValueError(
            f"data.lookback + data.horizon = {cfg.data.window} exceeds the context {context} of "
            f"{cfg.init} (+1); shorten the window, or give max_context (--max-context) to train a "
            "longer one"
        )
    return cfg.model_copy(update=update)


def build_modules(cfg: TrainConfig) -> tuple[KronosTokenizer, Kronos, TrainConfig]:
    """The run's starting (tokenizer, model) and the config as run (``config_as_run``).

    ``init`` loads both (its context and architecture kept; training-only fields such as
    dropout the user set are applied); else a predictor run takes ``tokenizer_init`` (or the
    bundled default tokenizer) and a new model of ``cfg.model`` size; a tokenizer run makes a
    new tokenizer of ``cfg.tokenizer`` size (and a new model to ship beside it).
    """
    if cfg.init:
        model, tok, context = _load_pair(cfg.init, cfg.tokenizer_init)
        model = _with_training_fields(model, cfg.model, cfg.init)
        tok = _with_training_fields(tok, cfg.tokenizer, cfg.tokenizer_init or cfg.init)
        return tok, model, config_as_run(cfg, tok, model, context)
    if cfg.kind == "tokenizer":
        tok = new_tokenizer(cfg)
        model = new_model(cfg, tok)
        return tok, model, config_as_run(cfg, tok, model, None)
    source = cfg.tokenizer_init or _bundled_tokenizer()
    if source is None:
        log.warning("no tokenizer given and none bundled: training against an untrained tokenizer")
        tok = new_tokenizer(cfg)
    else:
        tok = KronosTokenizer.from_pretrained(source)
        log.info("predictor run uses the tokenizer at %s (frozen)", source)
    model = new_model(cfg, tok)
    return tok, model, config_as_run(cfg, tok, model, None)


def save_pair(
    folder: Path, model: Kronos, tok: KronosTokenizer, cfg: TrainConfig, extra: dict | None = None
) -> None:
    """``folder/model``, ``folder/tokenizer`` (published layout) and ``folder/kronos.json``."""
    model.save_pretrained(folder / "model")
    tok.save_pretrained(folder / "tokenizer")
    info = {"name": cfg.name, "max_context": cfg.max_context, "kind": cfg.kind, **(extra or {})}
    (folder / KRONOS_JSON).write_text(json.dumps(info, indent=2, sort_keys=True))
