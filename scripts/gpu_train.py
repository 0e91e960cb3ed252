"""Training on a lent GPU machine from a corpus extract, with only torch, numpy, pandas, pyarrow
and safetensors installed (``scripts/gpu-train.sh`` runs it; docs/training.md, "GPU").

It never imports pydantic, yaml, tqdm, Ray or the service: the run's settings come from
``EXTRACT/train.json`` (a training config as JSON, which ``scripts/make-corpus-extract.py``
writes from a YAML config) or ``--config FILE.json``, else the defaults of
``kronos_core/train/config.py`` (``DEFAULTS``, kept equal by tests/train/test_gpu_train.py);
flags override them. The data path is the project's: ``kronos_core.train.data.corpus_series``
(both hold-out rules of ``kronos_core.data.corpus`` applied again to the extract, which holds
training rows only) and ``split_windows``; the losses are ``kronos_core.train.losses``.

The windows live on the device: every series' rows in one tensor, a window is gathered by its
start row and normalised on its lookback rows there (as ``normalize_window`` does on a CPU), so
the accelerator is not starved by a Python data loader.

Written under OUT (at most 8 files, at most two folders down, as the device tool returns them):
``checkpoint/model/``, ``checkpoint/tokenizer/`` (published layout: config.json +
model.safetensors), ``checkpoint/kronos.json`` (the weights of the lowest validation loss),
``metrics.jsonl`` (one line per logged step) and ``summary.json`` (losses, steps/s, samples/s,
wall time, device, windows, the settings as run).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kronos_core.base.candles import NORM_EPS  # noqa: E402
from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig  # noqa: E402
from kronos_core.train.data import corpus_series, split_windows  # noqa: E402
from kronos_core.train.losses import predictor_loss, tokenizer_loss  # noqa: E402
from kronos_core.train.techniques import (  # noqa: E402
    adamw,
    autocast_context,
    seed_everything,
    warmup_cosine,
)

# The training config's defaults (kronos_core/train/config.py) for the keys this script reads.
DEFAULTS: dict[str, Any] = {
    "kind": "predictor", "name": "kronos-custom", "max_context": 512, "seed": 0,
    "batch_size": 16, "max_steps": 200, "eval_every": 50, "log_every": 10, "val_batches": None,
    "tokenizer": {"d_model": 64, "n_heads": 4, "ff_dim": 128, "n_enc_layers": 3,
                  "n_dec_layers": 3, "s1_bits": 8, "s2_bits": 8},
    "model": {"d_model": 96, "n_layers": 3, "n_heads": 4, "ff_dim": 192},
    "data": {"lookback": 96, "horizon": 32, "stride": 16, "val_fraction": 0.15, "clip": 5.0,
             "max_windows_per_series": None, "markets": None, "frequencies": None},
    "optim": {"lr": 1e-3, "weight_decay": 0.05, "betas": [0.9, 0.95], "warmup_steps": 20,
              "min_lr_ratio": 0.1, "grad_clip": 1.0},
    "loss": {"feature_weights": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]},
}
# --tiny: sizes for the CPU dry run of the test suite
TINY = {"tokenizer": {"d_model": 16, "n_heads": 2, "ff_dim": 32, "n_enc_layers": 1,
                      "n_dec_layers": 1, "s1_bits": 4, "s2_bits": 4},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "ff_dim": 32},
        "data": {"lookback": 16, "horizon": 4, "stride": 4},
        "batch_size": 8, "max_steps": 6, "eval_every": 3, "log_every": 1, "max_context": 32,
        "optim": {"warmup_steps": 1}}
KEEP = {"tokenizer", "model", "data", "optim", "loss"}  # sections read; other keys: top level


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def settings(args: argparse.Namespace) -> dict:
    """DEFAULTS, then the JSON config (only the keys DEFAULTS has), --tiny, then the flags."""
    cfg = copy.deepcopy(DEFAULTS)
    config_file = Path(args.config) if args.config else Path(args.extract) / "train.json"
    if config_file.is_file():
        given = json.loads(config_file.read_text())
        known = {k: (v if k not in KEEP else {kk: vv for kk, vv in v.items() if kk in cfg[k]})
                 for k, v in given.items() if k in cfg}
        cfg = _merge(cfg, known)
        cfg["config_file"] = str(config_file)
    elif args.config:
        raise SystemExit(f"gpu_train: config {args.config} not found")
    if args.tiny:
        cfg = _merge(cfg, TINY)
    flags = {"kind": args.kind, "max_steps": args.max_steps, "batch_size": args.batch_size,
             "seed": args.seed, "eval_every": args.eval_every}
    cfg.update({k: v for k, v in flags.items() if v is not None})
    if args.lr is not None:
        cfg["optim"]["lr"] = args.lr
    if cfg["batch_size"] == "auto":
        cfg["batch_size"] = 256  # the planner is not here; a large step batch suits one big GPU
    return cfg


class DeviceWindows:
    """All windows of a run on the device: rows of every series in one tensor, windows by start.

    ``batch(idx)`` -> x (B, W, 6) normalised on each window's first ``lookback`` rows (mean and
    population std, + NORM_EPS, clipped to +-clip), stamp (B, W, 5)."""

    def __init__(self, series: list, index: list[tuple[int, int]], window: int, lookback: int,
                 clip: float, device: torch.device):
        offsets, total = [], 0
        for s in series:
            offsets.append(total)
            total += len(s.values)
        self.values = torch.cat([torch.from_numpy(s.values) for s in series]).to(device)  # (R, 6)
        self.stamps = torch.cat([torch.from_numpy(s.stamps) for s in series]).to(device)  # (R, 5)
        starts = [offsets[sid] + start for sid, start in index]
        self.starts = torch.tensor(starts, dtype=torch.long, device=device)  # (N,)
        self.steps = torch.arange(window, device=device)  # (W,)
        self.lookback, self.clip = lookback, clip

    def __len__(self) -> int:
        return len(self.starts)

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.starts[idx][:, None] + self.steps  # (B, W)
        x = self.values[rows]  # (B, W, 6)
        past = x[:, :self.lookback]  # (B, L, 6)
        mean = past.mean(dim=1, keepdim=True)  # (B, 1, 6)
        std = past.std(dim=1, unbiased=False, keepdim=True)  # (B, 1, 6)
        x = ((x - mean) / (std + NORM_EPS)).clamp(-self.clip, self.clip)
        return x, self.stamps[rows]  # (B, W, 6), (B, W, 5)


def build_modules(cfg: dict, args: argparse.Namespace) -> tuple[KronosTokenizer, Kronos, str]:
    """(tokenizer, predictor, where the tokenizer came from). A predictor run needs a trained
    tokenizer: --tokenizer, else EXTRACT/tokenizer, else the bundled default's."""
    if args.init:
        model = Kronos.from_pretrained(Path(args.init) / "model")
        tok = KronosTokenizer.from_pretrained(Path(args.init) / "tokenizer")
        return tok, model, str(args.init)
    if cfg["kind"] == "tokenizer":
        tok = KronosTokenizer(TokenizerConfig(d_in=6, **cfg["tokenizer"]))
        source = "new"
    else:
        candidates = [args.tokenizer, Path(args.extract) / "tokenizer",
                      REPO / "kronos_core" / "assets" / "models" / "kronos-default" / "tokenizer"]
        found = [Path(c) for c in candidates if c and (Path(c) / "config.json").is_file()]
        if args.tiny and not args.tokenizer:
            found = []  # the dry run's tiny sizes: a new tokenizer
        tok = (KronosTokenizer.from_pretrained(found[0]) if found
               else KronosTokenizer(TokenizerConfig(d_in=6, **cfg["tokenizer"])))
        source = str(found[0]) if found else "new (untrained)"
    bits = {"s1_bits": tok.config.s1_bits, "s2_bits": tok.config.s2_bits}
    return tok, Kronos(KronosConfig(**bits, **cfg["model"])), source


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def evaluate(loss_of, windows: DeviceWindows, batch: int, max_batches: int | None) -> float | None:
    """Mean loss over the validation windows in order (``max_batches`` caps them)."""
    if len(windows) == 0:
        return None
    total, count = 0.0, 0
    for k, lo in enumerate(range(0, len(windows), batch)):
        if max_batches is not None and k >= max_batches:
            break
        idx = torch.arange(lo, min(lo + batch, len(windows)), device=windows.starts.device)
        x, stamp = windows.batch(idx)
        total += loss_of(x, stamp).item() * len(idx)
        count += len(idx)
    return total / count


def train(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = settings(args)
    device = pick_device(args.device)
    precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    seed_everything(cfg["seed"])
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    d = cfg["data"]
    window = d["lookback"] + d["horizon"]
    data_cfg = SimpleNamespace(corpus=str(args.extract), markets=d["markets"],
                               frequencies=d["frequencies"], window=window, stride=d["stride"],
                               val_fraction=d["val_fraction"],
                               max_windows_per_series=d["max_windows_per_series"])
    if cfg["kind"] == "predictor" and window > cfg["max_context"] + 1:
        raise SystemExit(f"gpu_train: lookback + horizon = {window} exceeds max_context + 1 = "
                         f"{cfg['max_context'] + 1}")
    series = corpus_series(data_cfg)
    train_idx, val_idx = split_windows(series, data_cfg)
    if len(train_idx) < int(cfg["batch_size"]):
        raise SystemExit(f"gpu_train: {len(train_idx)} training windows, fewer than one batch "
                         f"of {cfg['batch_size']}; lower --batch-size or data.stride")
    train_w = DeviceWindows(series, train_idx, window, d["lookback"], d["clip"], device)
    val_w = DeviceWindows(series, val_idx, window, d["lookback"], d["clip"], device)
    data_s = time.perf_counter() - started

    tok, model, tok_source = build_modules(cfg, args)
    tok.to(device)
    model.to(device)
    trainable, frozen = (tok, model) if cfg["kind"] == "tokenizer" else (model, tok)
    frozen.requires_grad_(False).eval()
    trainable.requires_grad_(True).train()
    weights = cfg["loss"]["feature_weights"]
    fw = None if len(set(weights)) == 1 else torch.tensor(weights, dtype=torch.float32)

    def loss_of(x: torch.Tensor, stamp: torch.Tensor) -> torch.Tensor:
        with autocast_context(precision, device):
            if cfg["kind"] == "tokenizer":
                return tokenizer_loss(tok, x, fw).loss
            return predictor_loss(model, tok, x, stamp).loss

    o = cfg["optim"]
    optimizer = adamw(trainable, o["lr"], o["weight_decay"], o["betas"])
    max_steps, batch = int(cfg["max_steps"]), int(cfg["batch_size"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, o["warmup_steps"], max_steps, o["min_lr_ratio"]))
    gen = torch.Generator(device="cpu").manual_seed(cfg["seed"])
    deadline = started + args.minutes * 60.0
    records: list[dict] = []
    best: dict[str, Any] = {"val_loss": math.inf, "step": None, "state": None}
    first_loss = last_loss = None
    step, stop_reason = 0, "max_steps"
    warm_at = None
    _sync(device)
    train_started = time.perf_counter()
    metrics = (out / "metrics.jsonl").open("w")
    while step < max_steps:
        order = torch.randperm(len(train_w), generator=gen).to(device)
        for lo in range(0, len(order) - batch + 1, batch):
            x, stamp = train_w.batch(order[lo:lo + batch])
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of(x, stamp)
            loss.backward()
            if o["grad_clip"]:
                torch.nn.utils.clip_grad_norm_(trainable.parameters(), o["grad_clip"])
            optimizer.step()
            scheduler.step()
            step += 1
            record: dict[str, Any] = {}
            if step % cfg["log_every"] == 0 or step == 1 or step == max_steps:
                last_loss = loss.item()  # waits for the device
                first_loss = last_loss if first_loss is None else first_loss
                record = {"step": step, "loss": last_loss, "lr": scheduler.get_last_lr()[0],
                          "elapsed_s": round(time.perf_counter() - started, 3)}
            if step == 1:  # the first step pays lazy imports and kernel selection
                warm_at = time.perf_counter()
            out_of_time = time.perf_counter() > deadline
            if step % cfg["eval_every"] == 0 or step == max_steps or out_of_time:
                trainable.eval()
                val = evaluate(loss_of, val_w, batch, cfg["val_batches"])
                trainable.train()
                record.update(step=step, val_loss=val)
                if val is not None and val < best["val_loss"]:
                    state = {k: v.detach().to("cpu", copy=True)
                             for k, v in trainable.state_dict().items()}
                    best = {"val_loss": val, "step": step, "state": state}
            if record:
                records.append(record)
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
            if step >= max_steps:
                break
            if out_of_time:
                stop_reason = f"time budget of {args.minutes} min"
                break
        else:
            continue
        break
    metrics.close()
    _sync(device)
    ended = time.perf_counter()
    train_s = ended - train_started
    steady = (step - 1) / (ended - warm_at) if warm_at is not None and step > 1 else None

    if best["state"] is not None:
        trainable.load_state_dict(best["state"])
    ckpt = out / "checkpoint"
    model.save_pretrained(ckpt / "model")
    tok.save_pretrained(ckpt / "tokenizer")
    manifest = {"name": cfg["name"], "max_context": cfg["max_context"], "kind": cfg["kind"],
                "step": best["step"] if best["state"] is not None else step,
                "val_loss": None if math.isinf(best["val_loss"]) else best["val_loss"],
                "trained_with": "scripts/gpu_train.py"}
    (ckpt / "kronos.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    vals = [r["val_loss"] for r in records if r.get("val_loss") is not None]
    summary = {
        "kind": cfg["kind"], "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "precision": precision, "torch": torch.__version__, "steps": step, "stopped": stop_reason,
        "batch_size": batch, "train_windows": len(train_w), "val_windows": len(val_w),
        "series": len(series), "first_loss": first_loss, "last_loss": last_loss,
        "first_val_loss": vals[0] if vals else None, "best_val_loss": manifest["val_loss"],
        "best_step": manifest["step"], "steps_per_s": step / train_s if train_s else None,
        "steady_steps_per_s": steady,  # after the first step (no start-up costs)
        "samples_per_s": step * batch / train_s if train_s else None,
        "data_s": round(data_s, 3), "train_s": round(train_s, 3),
        "wall_s": round(time.perf_counter() - started, 3),
        "peak_gpu_mb": (torch.cuda.max_memory_allocated(device) / 2**20
                        if device.type == "cuda" else None),
        "tokenizer_from": tok_source, "init": args.init, "extract": str(args.extract),
        "settings": {k: v for k, v in cfg.items()},
        "files": ["checkpoint/kronos.json", "checkpoint/model/config.json",
                  "checkpoint/model/model.safetensors", "checkpoint/tokenizer/config.json",
                  "checkpoint/tokenizer/model.safetensors", "metrics.jsonl", "summary.json"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder for the checkpoint and the figures")
    p.add_argument("--extract", required=True, help="corpus extract (instruments.csv + Parquet)")
    p.add_argument("--config", help="training config as JSON (default: EXTRACT/train.json)")
    p.add_argument("--kind", choices=["predictor", "tokenizer"])
    p.add_argument("--tokenizer", help="predictor runs: the frozen tokenizer's folder")
    p.add_argument("--init", help="folder with model/ and tokenizer/ to start from")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--precision", choices=["fp32", "bf16"], help="default: bf16 on CUDA")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--minutes", type=float, default=7.0,
                   help="stop after this wall time (the device tool runs a command 10 min at most)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: the CPU dry run")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary = train(args)
    steady = summary["steady_steps_per_s"]
    print(f"gpu-train: {summary['steps']} steps ({summary['stopped']}) on {summary['device']} "
          f"in {summary['train_s']:.1f} s, {summary['steps_per_s']:.2f} steps/s "
          f"({'n/a' if steady is None else f'{steady:.2f}'} after the first), "
          f"{summary['samples_per_s']:.0f} windows/s; loss {summary['first_loss']:.4f} -> "
          f"{summary['last_loss']:.4f}; best validation loss {summary['best_val_loss']} at step "
          f"{summary['best_step']} ({summary['train_windows']} training, "
          f"{summary['val_windows']} validation windows)")
    print(f"gpu-train: wrote {args.out}/" + f", {args.out}/".join(summary["files"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
