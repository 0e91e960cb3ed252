"""``kronos train default``: the bundled default model, trained on the multi-market corpus.

Three phases: the tokenizer is *built* (``kronos_core.train.thermometer``: a residual thermometer
code that resolves the close to a tenth of a one-step move; its thresholds and decoder head are
fitted on 2,000 seeded training windows), then the predictor is trained from
``configs/default-predictor.yaml`` on that frozen tokenizer (early stopping on validation loss),
and its best checkpoint is annealed at a low learning rate (``configs/default-anneal.yaml``), all
on the training rows of the corpus (``--corpus DIR`` or ``KRONOS_CORPUS``;
``kronos_core.data.corpus`` applies both hold-out rules). The best weights of each are
copied to ``OUT/tokenizer`` and ``OUT/model`` with ``OUT/kronos.json`` (name, max_context, data,
steps, losses, wall time).

Run folders (checkpoints with optimiser state) go to ``--work``, outside the repository by default
(``~/.cache/kronos/train/kronos-default``). ``--resume`` continues an interrupted run from its last
checkpoint, so a schedule longer than one sitting spans several; the wall time of every sitting is
added up in ``WORK/wall_time.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import time
from pathlib import Path

from kronos_core.train.config import load_config

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
REAL_DATA = HERE.parent / "data" / "real"  # the bundled real candles (kronos train bench's data)
DEFAULT_OUT = HERE.parent / "assets" / "models" / "kronos-default"
DEFAULT_WORK = Path.home() / ".cache" / "kronos" / "train" / "kronos-default"
SUMMARY = "summary.json"
WALL_TIME = "wall_time.json"


class CorpusNotFound(FileNotFoundError):
    """No corpus folder given or found; the message says where it was looked for."""


def find_corpus(given: str | None) -> Path:
    """``given`` (``--corpus``), else ``$KRONOS_CORPUS``. The package never looks for a corpus
    beside itself: an installed package has no repository around it."""
    candidates = [given, os.environ.get("KRONOS_CORPUS")]
    for c in candidates:
        if c and (Path(c) / "instruments.csv").is_file():
            return Path(c)
    tried = ", ".join(c for c in candidates if c) or "nothing given"
    raise CorpusNotFound(f"no training corpus found ({tried}); pass --corpus DIR or set "
                         "KRONOS_CORPUS: a folder with instruments.csv and its Parquet files")


def _minutes_left(args: argparse.Namespace, work: Path) -> float | None:
    """What is left of ``--minutes`` for this sitting (None: no cap)."""
    cap = getattr(args, "minutes", None)
    if cap is None:
        return None
    started = getattr(args, "_sitting_started", None)
    if started is None:
        started = args._sitting_started = time.perf_counter()
    return max(cap - (time.perf_counter() - started) / 60, 0.01)


def _add_wall_time(work: Path, kind: str, seconds: float) -> dict:
    path = work / WALL_TIME
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[kind] = times.get(kind, 0.0) + seconds
    path.write_text(json.dumps(times, indent=2))
    return times


def _phase(kind: str, args: argparse.Namespace, work: Path, corpus: Path, extra: dict) -> dict:
    """Run one phase unless a finished summary is there (with --resume); returns its summary."""
    from kronos_core.train.trainer import train

    out = work / kind
    done = out / SUMMARY
    if getattr(args, "resume", False) and done.is_file():
        log.info("default model: %s phase already finished (%s)", kind, done)
        return json.loads(done.read_text())
    overrides = {
        "out": str(out), "data.corpus": str(corpus), "data.paths": getattr(args, "data", None),
        "max_steps": getattr(args, "max_steps", None), "seed": getattr(args, "seed", None),
        "threads": getattr(args, "threads", None), "device": getattr(args, "device", None),
        "max_minutes": _minutes_left(args, work), **_window_overrides(args), **extra,
    }
    cfg = load_config(CONFIGS / f"default-{kind}.yaml", overrides)
    resume = bool(getattr(args, "resume", False)) and (out / "last" / "trainer_state.pt").is_file()
    started = time.perf_counter()
    try:
        summary = train(cfg, resume=resume)
    finally:
        _add_wall_time(work, kind, time.perf_counter() - started)
    summary["config"] = str(out / "config.yaml")
    if not summary.get("stopped_for_time"):  # a phase cut by --minutes is resumed, not skipped
        done.write_text(json.dumps(summary, indent=2))
    return summary


class SittingOver(Exception):
    """A phase stopped at the --minutes cap; ``kronos train default --resume`` continues it."""


TOKENIZER_SAMPLE = 3000  # seeded training windows drawn; the first 2,000 fit the tokenizer
TOKENIZER_FIT = 2000


def _window_overrides(args: argparse.Namespace) -> dict:
    """--lookback / --horizon (None: the config's), for small corpora and tests."""
    return {"data.lookback": getattr(args, "lookback", None),
            "data.horizon": getattr(args, "horizon", None)}


def sample_training_windows(corpus: Path, count: int = TOKENIZER_SAMPLE, seed: int = 0,
                            overrides: dict | None = None):
    """``count`` training windows of the predictor's data config, normalised on their lookback
    and cut to it: (count, lookback, 6), drawn with ``seed`` (the same every run)."""
    import numpy as np

    from kronos_core.train.data import WindowDataset, load_series, split_windows

    cfg = load_config(CONFIGS / "default-predictor.yaml",
                      {"data.corpus": str(corpus), **(overrides or {})})
    series = load_series(cfg.data)
    train_idx, _ = split_windows(series, cfg.data)
    data = WindowDataset(series, train_idx, cfg.data)
    picks = np.random.default_rng(seed).choice(len(data), min(count, len(data)), replace=False)
    return np.stack([data[int(i)]["x"].numpy()[: cfg.data.lookback] for i in picks])


def _build_tokenizer(args: argparse.Namespace, work: Path, corpus: Path) -> dict:
    """Phase 1: build the thermometer tokenizer into WORK/tokenizer/best/tokenizer."""
    from kronos_core.train.thermometer import build_thermometer_tokenizer

    out = work / "tokenizer"
    done = out / SUMMARY
    if getattr(args, "resume", False) and done.is_file():
        log.info("default model: tokenizer already built (%s)", done)
        return json.loads(done.read_text())
    started = time.perf_counter()
    sample = sample_training_windows(corpus, overrides=_window_overrides(args))
    tok, errors = build_thermometer_tokenizer(sample[:TOKENIZER_FIT])
    tok.save_pretrained(out / "best" / "tokenizer")
    _add_wall_time(work, "tokenizer", time.perf_counter() - started)
    summary = {"kind": "thermometer", "fit_windows": TOKENIZER_FIT,
               "fit_mean_abs_error": errors, "out": str(out / "best" / "tokenizer")}
    done.write_text(json.dumps(summary, indent=2))
    return summary


def _command_line(args: argparse.Namespace, corpus: Path) -> str:
    """The command that made the model, as run: the corpus and output folders as given."""
    words = ["kronos", "train", "default", "--corpus", getattr(args, "corpus", None) or str(corpus)]
    if getattr(args, "out", None):
        words += ["--out", str(args.out)]
    return shlex.join(words)


def train_default(args: argparse.Namespace) -> dict:
    out = Path(getattr(args, "out", None) or DEFAULT_OUT)
    work = Path(getattr(args, "work", None) or DEFAULT_WORK)
    work.mkdir(parents=True, exist_ok=True)
    corpus = find_corpus(getattr(args, "corpus", None))
    tok_summary = _build_tokenizer(args, work, corpus)
    tok_dir = work / "tokenizer" / "best" / "tokenizer"
    pred_summary = _phase("predictor", args, work, corpus, {"tokenizer_init": str(tok_dir)})
    if pred_summary.get("stopped_for_time"):
        raise SittingOver(f"predictor phase stopped at step {pred_summary['steps']} of "
                          f"{pred_summary.get('max_steps')} (--minutes); continue with "
                          f"--resume --work {work}")
    anneal_summary = _phase(
        "anneal", args, work, corpus, {"init": str(work / "predictor" / "best")}
    )
    if anneal_summary.get("stopped_for_time"):
        raise SittingOver(f"anneal phase stopped at step {anneal_summary['steps']} (--minutes); "
                          f"continue with --resume --work {work}")
    best = work / "anneal" / "best"
    out.mkdir(parents=True, exist_ok=True)
    for part in ("model", "tokenizer"):
        shutil.rmtree(out / part, ignore_errors=True)
        shutil.copytree(best / part, out / part)
    cfg = load_config(CONFIGS / "default-predictor.yaml")
    times = json.loads((work / WALL_TIME).read_text()) if (work / WALL_TIME).is_file() else {}
    info = {
        "name": cfg.name, "max_context": cfg.max_context, "command": _command_line(args, corpus),
        "seed": getattr(args, "seed", None) or cfg.seed,
        "data": {"corpus": corpus.name, "rule": "split=train instruments, rows before eval_from "
                 "and outside every evaluation period of the same underlying"},
        "tokenizer": {"kind": tok_summary.get("kind"),
                      "fit_mean_abs_error": tok_summary.get("fit_mean_abs_error")},
        "predictor_val_loss": anneal_summary.get("best_val_loss"),
        "predictor_steps": {"schedule": pred_summary.get("steps"),
                            "best": (pred_summary.get("best") or {}).get("step"),
                            "anneal": (anneal_summary.get("best") or {}).get("step")},
        "wall_time_s": {k: round(v, 1) for k, v in times.items()},
    }
    (out / "kronos.json").write_text(json.dumps(info, indent=2))
    print(f"kronos train default: wrote {out / 'model'}, {out / 'tokenizer'} and "
          f"{out / 'kronos.json'}; wall time {sum(times.values()) / 60:.1f} min "
          f"(run folders and checkpoints in {work})")
    return {"out": str(out), **info}
