"""``kronos train tokenizer|predictor|default|bench``.

``tokenizer`` / ``predictor``: one run from a YAML config (``--config``) with flags
overriding it. ``default``: the bundled default model (tokenizer, then
predictor) from ``kronos_core/train/configs/default.yaml``. ``bench``: training
throughput and peak memory for a few techniques.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)

# flag dest -> dotted config key
OVERRIDES = {
    "out": "out", "max_steps": "max_steps", "init": "init", "tokenizer": "tokenizer_init",
    "batch_size": "batch_size", "accum_steps": "accum_steps", "precision": "precision",
    "grad_checkpointing": "grad_checkpointing", "seed": "seed", "device": "device",
    "lr": "optim.lr", "num_workers": "data.num_workers", "lookback": "data.lookback",
    "horizon": "data.horizon", "store": "data.store", "symbols": "data.symbols",
    "frequency": "data.frequency", "data": "data.paths", "corpus": "data.corpus",
    "markets": "data.markets", "frequencies": "data.frequencies", "eval_every": "eval_every",
    "save_every": "save_every", "max_context": "max_context", "name": "name", "threads": "threads",
    "minutes": "max_minutes", "keep_trained": "forecast_check.keep_trained",
}


def _batch(text: str):
    return text if text == "auto" else int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what", choices=["tokenizer", "predictor", "default", "bench"],
        help="what to train (default: the bundled default model; bench: throughput figures)",
    )
    parser.add_argument(
        "--config", help="YAML training config (see docs/training.md); flags override it"
    )
    parser.add_argument("--data", nargs="+", help="CSV/Parquet files or folders of them")
    parser.add_argument("--store", help="Arrow store root (with --frequency, optional --symbols)")
    parser.add_argument(
        "--corpus",
        help="corpus folder (instruments.csv + Parquet files): "
        "only split=train instruments' training rows are read (both hold-outs respected)",
    )
    parser.add_argument(
        "--markets", nargs="+", help="corpus markets to train on (US, CN, FX, crypto, ...)"
    )
    parser.add_argument(
        "--frequencies", nargs="+", help="corpus frequencies to train on (1d, 1h, 5min, 1min)"
    )
    parser.add_argument("--symbols", nargs="+", help="store symbols (default: the whole universe)")
    parser.add_argument("--frequency", help="store frequency, e.g. 5min or 1d")
    parser.add_argument("--out", help="output folder (best/, last/, metrics.jsonl)")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument(
        "--minutes", type=float,
        help="wall-clock cap of this sitting: stop at a checkpoint once past it (--resume "
        "continues; for default, the cap covers all of its phases)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last")
    parser.add_argument(
        "--keep-trained", action="store_true", default=None,
        help="predictor from --init: keep the trained weights in best/ even when the forecasting "
        "check finds them worse (it still runs and is reported)")
    parser.add_argument(
        "--init",
        help="start from this checkpoint: a folder with model/ + tokenizer/, a Hub id, or an "
        "alias (kronos-default: the bundled model; kronos-mini|small|base)",
    )
    parser.add_argument(
        "--tokenizer", help="tokenizer folder or Hub id (a predictor run keeps it frozen)"
    )
    parser.add_argument("--batch-size", type=_batch, help="windows per optimiser step, or 'auto'")
    parser.add_argument(
        "--accum-steps", type=int, help="micro-batches per step (gradient accumulation)"
    )
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--grad-checkpointing", action="store_true", default=None)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--lr", type=float)
    parser.add_argument(
        "--num-workers", type=int, help="data-loading worker processes (0: in-process)"
    )
    parser.add_argument("--lookback", type=int)
    parser.add_argument("--horizon", type=int)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--save-every", type=int)
    parser.add_argument("--max-context", type=int)
    parser.add_argument("--name")
    parser.add_argument(
        "--threads", type=int,
        help="torch CPU threads (default 1: on the project's shared 2-core machine one thread "
        "trained faster than two, docs/training.md; raise it on a machine with idle cores)"
    )
    parser.add_argument("--backend", choices=["local", "ray"], default="local",
                        help="local (one process, or torchrun) or ray (Ray Train TorchTrainer)")
    parser.add_argument("--ray", action="store_true", help="same as --backend ray")
    parser.add_argument("--workers", type=int, default=2, help="Ray Train workers")
    parser.add_argument("--use-gpu", action="store_true", help="Ray Train: one GPU per worker")
    parser.add_argument(
        "--ray-address", default=None, help="Ray cluster address (default: auto / local)"
    )
    parser.add_argument(
        "--work", help="default: folder for the two run folders (default runs/kronos-default)"
    )
    parser.add_argument("--steps", type=int, default=8, help="bench: steps per configuration")
    parser.add_argument(
        "--compare-threads", type=int, nargs="+", metavar="T",
        help="bench: time fp32 steps at each of these thread counts instead of the techniques "
        "(e.g. 1 2), alternating, --rounds times")
    parser.add_argument("--rounds", type=int, default=3,
                        help="bench --compare-threads: rounds of every count")
    from kronos_core.data.reader import add_reader_arguments

    # --time-column, --column, --sort, --drop-nan, ... as every command reads files
    add_reader_arguments(parser)
    # old spelling
    parser.add_argument("--timestamp-column", dest="time_column", help=argparse.SUPPRESS)


REPAIRS = ("drop_nan", "drop_duplicates", "sort", "fix_high_low", "clip_negative")


def reader_overrides(args: argparse.Namespace) -> dict:
    """The reader flags as dotted config keys (None: the config's own value)."""
    chosen = list(REPAIRS) if getattr(args, "repair_input", False) else [
        r for r in REPAIRS if getattr(args, r, False)]
    column_map = None
    if getattr(args, "column", None):
        from kronos_core.data.reader import parse_column_map

        column_map = parse_column_map(args.column)
    return {"data.timestamp_column": getattr(args, "time_column", None), "data.columns": column_map,
            "data.repairs": sorted(set(chosen) | {"sort"}) if chosen else None}


def config_from_args(args: argparse.Namespace, kind: str):
    from kronos_core.train.config import load_config

    overrides = {key: getattr(args, dest, None) for dest, key in OVERRIDES.items()}
    overrides.update(reader_overrides(args))
    overrides["kind"] = kind
    return load_config(args.config, overrides)


def interrupted_hint(what: str, out, step: int, saved_step: int | None) -> str:
    """What Ctrl-C during ``kronos train WHAT`` prints: where the last checkpoint is and the
    command that continues from it (or that none was written yet)."""
    if saved_step is None:
        return (f"kronos train {what}: interrupted at step {step}, before the first checkpoint; "
                f"nothing to resume in {out} (run the command again to start over)")
    flags = "--work ... --resume" if what == "default" else f"--out {out} --resume"
    return (f"kronos train {what}: interrupted at step {step}; {out}/last holds step {saved_step}. "
            f"Continue from it with the same command and --resume: kronos train {what} ... {flags}")


def requires(args: argparse.Namespace) -> list:
    """``--backend ray`` runs under Ray Train (the ``train`` extra)."""
    from kronos_core.cli.requirements import Need

    if getattr(args, "ray", False) or getattr(args, "backend", "local") == "ray":
        return [Need("ray", "train", "--backend ray")]
    return []


def run(args: argparse.Namespace) -> int:
    from kronos_core.model import CheckpointError
    from kronos_core.train.config import ConfigFileError
    from kronos_core.train.default import SittingOver

    try:
        if args.what == "default":
            from kronos_core.train.default import train_default

            summary = train_default(args)
        elif args.what == "bench":
            from kronos_core.train.bench import run_bench

            return run_bench(args)
        else:
            cfg = config_from_args(args, args.what)
            if args.ray or args.backend == "ray":
                from kronos_core.train.ray_backend import train_with_ray

                summary = train_with_ray(cfg, workers=args.workers, use_gpu=args.use_gpu,
                                         resume=args.resume, address=args.ray_address)
            else:
                from kronos_core.train.trainer import train

                summary = train(cfg, resume=args.resume)
    except (ConfigFileError, CheckpointError, ValueError, FileNotFoundError) as exc:
        print(f"kronos train: {exc}", file=sys.stderr)
        return 2
    except SittingOver as exc:  # --minutes reached: a checkpoint to resume, not a failure
        print(f"kronos train default: {exc}", file=sys.stderr)
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C: say how to continue, no traceback
        from kronos_core.train.trainer import TrainingInterrupted

        if isinstance(exc, TrainingInterrupted):
            print(interrupted_hint(args.what, exc.out, exc.step, exc.saved_step), file=sys.stderr)
        else:
            print(f"kronos train {args.what}: interrupted before training started", file=sys.stderr)
        return 130
    if summary is not None:
        print(json.dumps(summary, indent=2))
    return 0
