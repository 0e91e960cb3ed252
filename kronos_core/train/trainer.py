"""The training loop shared by ``kronos train tokenizer|predictor``, torchrun and Ray Train.

One ``Trainer`` trains either the tokenizer (the predictor rides along unchanged)
or the predictor (the tokenizer frozen). Each optimisation step takes this rank's
share of ``batch_size`` windows, cuts it into ``accum_steps`` micro-batches,
back-propagates each (weighted by its size), clips, steps AdamW and the warm-up +
cosine schedule. On an out-of-memory error the step is redone with twice the
micro-batches (half the size each), so the effective batch stays the same.

A predictor run from a checkpoint (``init``) checks forecasts before and after
(``forecast_check``): ``best/`` ends up holding the starting weights again when the trained
ones forecast worse on the validation windows.

Output folder (rank 0 writes): ``last/`` and ``best/`` (each ``model/``,
``tokenizer/``, ``kronos.json``; ``last/trainer_state.pt`` holds optimiser,
scheduler, RNG and data position for ``resume``), ``metrics.jsonl``,
``config.yaml``, ``summary.json``, ``forecast_check.json`` (runs that check forecasts),
``resources.json`` (when ``kronos_core.base.monitor`` exists). ``train`` prints what the run did
(``report``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from tqdm import tqdm

from kronos_core.train.config import TrainConfig
from kronos_core.train.data import (
    StepBatchSampler,
    WindowDataset,
    load_series,
    make_loader,
    split_windows,
)
from kronos_core.train.distributed import all_reduce_sum, init_distributed, pick_device, shutdown
from kronos_core.train.forecast_check import CheckWindows, check_windows, decide, forecast_figures
from kronos_core.train.losses import predictor_loss, tokenizer_loss
from kronos_core.train.metrics import MetricsLog
from kronos_core.train.modules import build_modules, save_pair
from kronos_core.train.techniques import (
    adamw,
    autocast_context,
    enable_block_checkpointing,
    is_out_of_memory,
    make_scaler,
    rng_state,
    seed_everything,
    set_rng_state,
    warmup_cosine,
)

if TYPE_CHECKING:
    from kronos_core.base.monitor import ResourceMonitor

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.pt"
SUMMARY_FILE = "summary.json"
FORECAST_CHECK_FILE = "forecast_check.json"


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``Trainer.fit``: the bar, logs and process group are closed; says where the
    last checkpoint is (``saved_step`` None: none written yet) so the command can say how to
    resume."""

    def __init__(self, out: Path, step: int, saved_step: int | None):
        super().__init__(f"interrupted at step {step}")
        self.out, self.step, self.saved_step = out, step, saved_step


class Objective(nn.Module):
    """Wraps the pair so DDP sees one ``forward(x, stamp) -> loss``; parts of the last call in
    ``parts``."""

    def __init__(self, kind: str, model, tok, feature_weights: Sequence[float] | None = None):
        super().__init__()
        self.kind, self.model, self.tok = kind, model, tok
        weights = (
            None if feature_weights is None or len(set(feature_weights)) == 1 else feature_weights
        )
        self.feature_weights = (
            None if weights is None else torch.tensor(weights, dtype=torch.float32)
        )
        self.parts: dict[str, float] = {}

    def forward(self, x: torch.Tensor, stamp: torch.Tensor) -> torch.Tensor:
        if self.kind == "tokenizer":
            out = tokenizer_loss(self.tok, x, self.feature_weights)
        else:
            out = predictor_loss(self.model, self.tok, x, stamp)
        self.parts = out.parts
        return out.loss


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False):
        self.cfg, self.out = cfg, Path(cfg.out)
        self.dist = init_distributed(cfg.device)
        self.device = pick_device(cfg.device, self.dist)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        series = load_series(cfg.data)
        train_idx, val_idx = split_windows(series, cfg.data)
        self.train_set = WindowDataset(series, train_idx, cfg.data, reflect=cfg.data.reflect)
        self.val_set = WindowDataset(series, val_idx, cfg.data)
        # the config as run: a checkpoint's context, sizes and dropout, not the defaults
        self.tok, self.model, self.cfg = build_modules(cfg)
        cfg = self.cfg
        self._setup_modules()
        self._setup_batch()
        self.check_windows = self._forecast_check_windows(series, val_idx)
        self.objective = Objective(cfg.kind, self.model, self.tok, cfg.loss.feature_weights)
        self.net = self._wrap_ddp(self.objective)
        o = cfg.optim
        self.optimizer = adamw(self.trainable, o.lr, o.weight_decay, o.betas)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: warmup_cosine(s, o.warmup_steps, cfg.max_steps, o.min_lr_ratio),
        )
        self.scaler = make_scaler(cfg.precision, self.device)
        self.sampler = StepBatchSampler(len(self.train_set), self.batch_size, seed=cfg.seed,
                                        rank=self.dist.rank, world=self.dist.world)
        self.step = self.epoch = self.position = 0
        self.saved_step: int | None = None  # step of the checkpoint in last/, for the Ctrl-C hint
        self.best_val, self.bad_evals, self.stopped_early = math.inf, 0, False
        self.stopped_for_time = False  # max_minutes reached: last/ holds the step to resume
        self.sitting_started, self.paced = time.perf_counter(), False
        self.step_times: list[float] = []
        self.history: list[dict] = []
        # a kronos_core.base.monitor.ResourceMonitor told about every step, when set
        self.monitor: ResourceMonitor | None = None
        if resume:
            self._load_state()
        self.metrics = MetricsLog(self.out, enabled=self.dist.is_main, tensorboard=cfg.tensorboard,
                                  keep_until=self.step if resume else 0)

    # ---- set-up ---------------------------------------------------------------------
    def _setup_modules(self) -> None:
        cfg = self.cfg
        self.trainable = self.tok if cfg.kind == "tokenizer" else self.model
        frozen = self.model if cfg.kind == "tokenizer" else self.tok
        frozen.requires_grad_(False).eval()
        self.trainable.requires_grad_(True).train()
        self.tok.to(self.device)
        self.model.to(self.device)
        if cfg.grad_checkpointing:
            if cfg.kind == "tokenizer":
                enable_block_checkpointing(self.tok.encoder)
                enable_block_checkpointing(self.tok.decoder)
            else:
                enable_block_checkpointing(self.model.transformer)

    def _setup_batch(self) -> None:
        cfg, world = self.cfg, self.dist.world
        if cfg.batch_size == "auto":
            from kronos_core.train.batch_size import auto_batch_size

            micro = auto_batch_size(cfg.kind, self.model, self.tok, cfg.data.window, cfg.precision,
                                    cfg.grad_checkpointing, self.device)
            # no more than the data
            micro = max(1, min(micro, len(self.train_set) // (cfg.accum_steps * world)))
            self.batch_size = micro * cfg.accum_steps * world
        else:
            self.batch_size = cfg.batch_size
        if self.batch_size % world:
            raise ValueError(
                f"batch_size {self.batch_size} is not divisible by the {world} processes"
            )
        if self.batch_size > len(self.train_set):
            raise ValueError(
                f"batch_size {self.batch_size} exceeds the {len(self.train_set)} training "
                "windows; lower batch_size or data.stride"
            )
        self.accum = min(cfg.accum_steps, self.batch_size // world)

    def _forecast_check_windows(self, series, val_idx) -> CheckWindows | None:
        """The validation windows of the forecasting check, when this run checks forecasts."""
        cfg = self.cfg
        if not cfg.checks_forecasts:
            return None
        fc = cfg.forecast_check
        horizon = min(fc.horizon, cfg.data.horizon)
        windows = check_windows(series, val_idx, cfg.data.lookback, horizon, fc.windows)
        if windows is None:
            log.warning("forecasting check skipped: no validation window with timestamps "
                        "(raise data.val_fraction or give longer series)")
        return windows

    def _wrap_ddp(self, objective: nn.Module) -> nn.Module:
        if self.dist.world <= 1:
            return objective
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(objective, device_ids=ids)

    @property
    def micro_batch_size(self) -> int:
        return math.ceil(self.batch_size // self.dist.world / self.accum)

    # ---- one step -------------------------------------------------------------------
    def _micro_steps(self, x: torch.Tensor, stamp: torch.Tensor) -> tuple[float, dict]:
        """Forward/backward every micro-batch of this rank's share; returns the share's mean loss
        and parts."""
        n = x.shape[0]
        chunks = torch.arange(n).tensor_split(min(self.accum, n))
        parts: dict[str, float]
        total, parts = 0.0, {}
        for i, rows in enumerate(chunks):
            last = i == len(chunks) - 1
            # self.net is a DistributedDataParallel when world > 1; torch types the by-name
            # attribute of a plain nn.Module as Tensor | Module
            sync = contextlib.nullcontext() if last or self.dist.world == 1 else self.net.no_sync()  # type: ignore[operator]
            with sync:
                with autocast_context(self.cfg.precision, self.device):
                    loss = self.net(x[rows], stamp[rows])
                weighted = loss * (len(rows) / n)
                (self.scaler.scale(weighted) if self.scaler else weighted).backward()
            total += loss.item() * len(rows) / n
            for k, v in self.objective.parts.items():
                parts[k] = parts.get(k, 0.0) + v * len(rows) / n
        return total, parts

    def _apply_update(self) -> float | None:
        clip = self.cfg.optim.grad_clip
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.trainable.parameters(), clip) if clip else None
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        return None if norm is None else float(norm)

    def train_step(self, batch: dict) -> dict:
        """One optimisation step on a step batch; halves the micro-batch and retries on OOM."""
        # (b, W, 6), (b, W, 5)
        x, stamp = batch["x"].to(self.device), batch["stamp"].to(self.device)
        while True:
            self.optimizer.zero_grad(set_to_none=True)
            try:
                loss, parts = self._micro_steps(x, stamp)
                break
            except Exception as exc:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_out_of_memory(exc) or self.micro_batch_size <= 1:
                    raise
                self.accum *= 2
                log.warning("out of memory (%s); retrying with micro-batch %d x %d accumulation",
                            str(exc).splitlines()[0][:80], self.micro_batch_size, self.accum)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm = self._apply_update()
        loss_sum, rows = all_reduce_sum(
            [loss * x.shape[0], float(x.shape[0])], self.dist, self.device
        )
        return {
            "loss": loss_sum / rows, "lr": lr, "grad_norm": grad_norm,
            "micro_batch": self.micro_batch_size, "accum": self.accum, **parts,
        }

    # ---- evaluation -----------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean loss over the validation windows (all ranks together); None without any."""
        if len(self.val_set) == 0:
            return None
        sampler = StepBatchSampler(
            len(self.val_set), self.micro_batch_size * self.dist.world, shuffle=False,
            drop_last=False, rank=self.dist.rank, world=self.dist.world,
        )
        self.objective.eval()
        total = count = 0.0
        for i, batch in enumerate(make_loader(self.val_set, sampler, 0)):
            if self.cfg.val_batches is not None and i >= self.cfg.val_batches:
                break
            x, stamp = batch["x"].to(self.device), batch["stamp"].to(self.device)
            with autocast_context(self.cfg.precision, self.device):
                loss = self.objective(x, stamp)
            total, count = total + loss.item() * x.shape[0], count + x.shape[0]
        self.trainable.train()
        total, count = all_reduce_sum([total, count], self.dist, self.device)
        return total / count if count else None

    # ---- the loop -------------------------------------------------------------------
    def fit(self) -> dict:
        """Train until ``max_steps`` (or early stopping); returns a summary."""
        cfg = self.cfg
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(_yaml(cfg))
        before = self._forecast_before()
        bar = tqdm(
            total=cfg.max_steps, initial=self.step, desc=f"train {cfg.kind}",
            disable=not self.dist.is_main, dynamic_ncols=True,
        )
        started = time.perf_counter()
        try:
            samples = self._loop(bar)
        except KeyboardInterrupt:
            bar.close()
            self.metrics.close()
            shutdown(self.dist)
            raise TrainingInterrupted(self.out, self.step, self.saved_step) from None
        bar.close()
        if self.dist.is_main and not (self.out / "best").is_dir():
            self._save("best")  # no validation windows: the last weights are the best we know
        elapsed = time.perf_counter() - started
        self.metrics.close()
        finished = not self.stopped_for_time
        check = (self._forecast_after(before)
                 if finished and self.dist.is_main and before is not None else None)
        shutdown(self.dist)
        best_val = None if math.isinf(self.best_val) else self.best_val
        summary: dict[str, Any] = {
            "steps": self.step, "best_val_loss": best_val, "stopped_early": self.stopped_early,
            "stopped_for_time": self.stopped_for_time, "max_steps": cfg.max_steps,
            "seconds": elapsed, "samples_per_s": samples / elapsed if elapsed else None,
            "out": str(self.out), "batch_size": self.batch_size,
            "micro_batch": self.micro_batch_size, "accum": self.accum,
            "world_size": self.dist.world, "lr": cfg.optim.lr,
            "train_windows": len(self.train_set), "val_windows": len(self.val_set)}
        if self.dist.is_main:
            summary["best"] = best_checkpoint(self.out)
            summary["forecast_check"] = check
            summary["files"] = written_files(self.out, also=(SUMMARY_FILE,))
            (self.out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        return summary

    # ---- the forecasting check (runs from a checkpoint) -----------------------------------
    def _forecast_figures(self, model: nn.Module) -> dict:
        fc = self.cfg.forecast_check
        assert self.check_windows is not None
        figures = forecast_figures(
            model, self.tok, self.check_windows, paths=fc.paths, seed=fc.seed, device=self.device,
            max_context=self.cfg.max_context, clip=self.cfg.data.clip,
        )
        self.trainable.train()  # the predictor put it in eval mode
        return figures

    def _init_model(self) -> nn.Module:
        """The predictor as ``init`` holds it (read again: the run's copy has trained)."""
        from kronos_core.train.modules import load_init_model

        assert self.cfg.init is not None
        return load_init_model(self.cfg.init, self.cfg.tokenizer_init).to(self.device)

    def _forecast_before(self) -> dict | None:
        """The starting weights' figures (main process; a resumed run reads them back)."""
        if self.check_windows is None or not self.dist.is_main:
            return None
        path = self.out / FORECAST_CHECK_FILE
        if self.step > 0 and path.is_file():
            return json.loads(path.read_text())["before"]
        before = self._forecast_figures(self.model if self.step == 0 else self._init_model())
        path.write_text(json.dumps({"metric": self.cfg.forecast_check.metric, "before": before},
                                   indent=2))
        log.info("forecasting check before training: %s", before)
        return before

    def _forecast_after(self, before: dict) -> dict:
        """Score ``best/``; put the starting weights back there when the paired check finds it
        forecasts worse (``decide``), unless ``forecast_check.keep_trained``. Weights put back are
        marked: ``best/kronos.json`` gets ``kept: "init"`` and the name ``<name>-kept-init``,
        which ``/v1/models`` and every report show."""
        from kronos_core.model.checkpoint import load_state_strict, read_weights

        fc = self.cfg.forecast_check
        metric, best = fc.metric, self.out / "best"
        load_state_strict(self.model, read_weights(best / "model"), str(best / "model"))
        after = self._forecast_figures(self.model)
        decision = decide(before, after, metric, fc.alpha)
        kept = decision["kept"]
        if kept == "init" and fc.keep_trained:
            kept = "trained"
            decision["reason"] += "; kept the trained weights as asked (keep_trained)"
        if kept == "init":
            self.model.load_state_dict(self._init_model().state_dict())
            # the starting weights' validation loss (one process: others may have left)
            val = self.evaluate() if self.dist.world == 1 else None
            self._save("best", {"step": 0, "val_loss": val, "source": "init",
                                "init": self.cfg.init, "kept": "init",
                                "name": kept_name(self.cfg.name),
                                "forecast_check": decision["reason"]})
            log.warning("forecasting check: %s; best/ holds the starting weights of %s, named "
                        "%s (--keep-trained keeps the trained ones)", decision["reason"],
                        self.cfg.init, kept_name(self.cfg.name))
        else:
            log.info("forecasting check: %s", decision["reason"])
        check = {"metric": metric, "before": before, "after": after, "kept": kept,
                 "reason": decision["reason"], "test": decision["test"],
                 "keep_trained": fc.keep_trained}
        (self.out / FORECAST_CHECK_FILE).write_text(json.dumps(check, indent=2))
        return check

    def _out_of_time(self) -> bool:
        """Past ``max_minutes`` of this sitting (checked after each step)?"""
        cap = self.cfg.max_minutes
        if cap is None or time.perf_counter() - self.sitting_started < cap * 60:
            return False
        self.stopped_for_time = True
        log.info("stopping at step %d: the %.1f-minute cap of this sitting is reached; "
                 "--resume continues from last/", self.step, cap)
        return True

    def _pace(self, step_s: float) -> None:
        """In the first minute of a sitting: seconds per step and the estimated total, once
        after 5 steps and once after a minute."""
        self.step_times.append(step_s)
        elapsed = time.perf_counter() - self.sitting_started
        first_minute_over = elapsed >= 60 and not self.paced
        if len(self.step_times) != 5 and not first_minute_over:
            return
        self.paced = self.paced or first_minute_over
        recent = sorted(self.step_times[-50:])
        per_step = recent[len(recent) // 2]
        left = self.cfg.max_steps - self.step
        cap = self.cfg.max_minutes
        eta = per_step * left / 60
        capped = f", capped at {cap:g} min by --minutes" if cap is not None and eta > cap else ""
        message = (f"{per_step:.2f} s a step (median of {len(recent)}); {left} steps left: "
                   f"about {eta:.1f} min{capped}")
        log.info("train %s: %s", self.cfg.kind, message)
        if self.dist.is_main:
            tqdm.write(f"train {self.cfg.kind}: {message}", file=sys.stderr)

    def _loop(self, bar) -> int:
        """The steps from ``self.step`` to the end (or early stopping, or the sitting's time cap);
        returns the samples seen."""
        cfg, samples = self.cfg, 0
        self.sitting_started, self.paced = time.perf_counter(), False
        self.step_times = []
        while self.step < cfg.max_steps and not self.stopped_early and not self.stopped_for_time:
            self.sampler.epoch, self.sampler.position = self.epoch, self.position
            loader = make_loader(self.train_set, self.sampler, cfg.data.num_workers,
                                 generator=torch.Generator().manual_seed(cfg.seed + self.epoch))
            for batch in loader:
                t0 = time.perf_counter()
                record = self.train_step(batch)
                self.step, self.position = self.step + 1, self.position + 1
                samples += self.batch_size
                if self.monitor is not None:
                    self.monitor.step(n_samples=self.batch_size)
                record.update(step=self.step, epoch=self.epoch, step_s=time.perf_counter() - t0,
                              samples_per_s=self.batch_size / max(time.perf_counter() - t0, 1e-9))
                self._pace(record["step_s"])
                out_of_time = self._out_of_time()
                self._after_step(record, bar)
                if self.step >= cfg.max_steps or self.stopped_early or out_of_time:
                    break
            else:
                self.epoch, self.position = self.epoch + 1, 0
        return samples

    def _after_step(self, record: dict, bar) -> None:
        cfg = self.cfg
        if self.step % cfg.eval_every == 0 or self.step == cfg.max_steps:
            val = self.evaluate()
            record["val_loss"] = val
            if val is not None and val < self.best_val:
                self.best_val, self.bad_evals = val, 0
                if self.dist.is_main:
                    self._save("best", {"val_loss": val})
            elif val is not None:
                self.bad_evals += 1
                patience = cfg.early_stopping_patience
                if patience is not None and self.bad_evals >= patience:
                    self.stopped_early = True
                    log.info(
                        "early stopping at step %d: no validation gain in %d evaluations",
                        self.step, patience,
                    )
        self.history.append(record)
        self.metrics.write(record)
        bar.update(1)
        bar.set_postfix(
            loss=f"{record['loss']:.4f}",
            **({"val": f"{record['val_loss']:.4f}"} if record.get("val_loss") is not None else {}),
        )
        last = self.step == cfg.max_steps or self.stopped_early or self.stopped_for_time
        if self.dist.is_main and (self.step % cfg.save_every == 0 or last):
            self._save("last")

    # ---- checkpoints ----------------------------------------------------------------
    def _save(self, which: str, extra: dict | None = None) -> None:
        """Write ``out/which`` via a temporary folder so a kill never leaves a half-written one."""
        target, tmp = self.out / which, self.out / f".{which}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_pair(tmp, self.model, self.tok, self.cfg, {"step": self.step, **(extra or {})})
        if which == "last":
            torch.save(self._state(), tmp / STATE_FILE)
        old = self.out / f".{which}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        if which == "last":
            self.saved_step = self.step

    def _state(self) -> dict:
        return {
            "step": self.step, "epoch": self.epoch, "position": self.position,
            "best_val": self.best_val, "bad_evals": self.bad_evals, "accum": self.accum,
            "batch_size": self.batch_size, "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "rng": rng_state(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
        }

    def _load_state(self) -> None:
        folder = self.out / "last"
        if not (folder / STATE_FILE).is_file():
            folder = self.out / ".last.old"  # killed while replacing last/
        if not (folder / STATE_FILE).is_file():
            raise FileNotFoundError(
                f"--resume: no {STATE_FILE} under {self.out}/last; start without --resume"
            )
        from kronos_core.model.checkpoint import load_state_strict, read_weights

        load_state_strict(self.model, read_weights(folder / "model"), str(folder / "model"))
        load_state_strict(self.tok, read_weights(folder / "tokenizer"), str(folder / "tokenizer"))
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        if state["batch_size"] != self.batch_size:
            raise ValueError(
                f"--resume: the run used batch_size {state['batch_size']}, now {self.batch_size}"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.best_val, self.bad_evals, self.accum = (
            state["best_val"], state["bad_evals"], state["accum"],
        )
        set_rng_state(state["rng"])
        self.saved_step = self.step
        log.info(
            "resumed %s at step %d (epoch %d, batch %d)", folder, self.step, self.epoch,
            self.position,
        )


KEPT_SUFFIX = "-kept-init"


def kept_name(name: str) -> str:
    """The name of a ``best/`` that holds the starting weights again (the forecasting check
    kept them): ``name`` with ``KEPT_SUFFIX``, so it is never mistaken for trained weights."""
    return name if name.endswith(KEPT_SUFFIX) else name + KEPT_SUFFIX


def best_checkpoint(out: Path) -> dict:
    """Where ``best/`` is and what it holds: step, validation loss, ``source`` ("trained", or
    "init" when the forecasting check put the starting weights back), its model ``name`` and
    ``kept`` (the guard's mark when it kept the starting weights; None otherwise)."""
    folder = out / "best"
    manifest = folder / "kronos.json"
    info = json.loads(manifest.read_text()) if manifest.is_file() else {}
    return {"path": str(folder), "step": info.get("step"), "val_loss": info.get("val_loss"),
            "source": info.get("source", "trained"), "name": info.get("name"),
            "kept": info.get("kept")}


def written_files(out: Path, also: Sequence[str] = ()) -> list[str]:
    """Every file of the output folder (relative paths, sorted), plus ``also`` (about to be
    written); temporary folders left out."""
    names = {str(p.relative_to(out)) for p in out.rglob("*")
             if p.is_file() and not p.relative_to(out).parts[0].startswith(".")}
    return sorted(names | set(also))


def _figure(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def report(summary: dict) -> str:
    """What a run did, for people: windows, best checkpoint, the forecasting check, files."""
    out = Path(summary["out"])
    best = summary.get("best") or {}
    lines = [f"trained {summary['steps']} steps on {summary['train_windows']} training windows "
             f"({summary['val_windows']} validation windows) in {summary['seconds']:.1f} s",
             f"best checkpoint: {best.get('path')} (step {best.get('step')}, validation loss "
             f"{_figure(best.get('val_loss'))}, {best.get('source')} weights)"]
    check = summary.get("forecast_check")
    if check:
        metric, b, a = check["metric"], check["before"], check["after"]
        lines.append(f"forecasting check on {b['windows']} validation windows x {b['paths']} "
                     f"paths, {b['horizon']} steps (close; decides on {metric}):")
        for name, fig in (("before", b), ("after", a)):
            lines.append(f"  {name:<6}  CRPS/scale {_figure(fig.get('crps_scaled'))}  MASE "
                         f"{_figure(fig.get('mase'))}  (last value MASE "
                         f"{_figure(fig.get('naive_mase'))})")
        test = check.get("test") or {}
        if test.get("interval_95"):
            lo, hi = test["interval_95"]
            p_worse = _figure(test.get("p_value_worse"))
            lines.append(f"  paired test on {test['windows']} windows x {test.get('paths')} paths: "
                         f"{metric} difference {_figure(test['mean_difference'])} (95% "
                         f"{_figure(lo)} .. {_figure(hi)}), one-sided p {p_worse}")
        if check.get("reason"):
            lines.append(f"  {check['reason']}")
        lines.append("  kept the trained weights" if check["kept"] == "trained" else
                     f"  kept the STARTING weights in best/, named {best.get('name')} "
                     "(--keep-trained keeps the trained ones)")
    if summary.get("stopped_for_time"):
        lines.append(f"stopped at the --minutes cap at step {summary['steps']} of "
                     f"{summary.get('max_steps')}: run it again with --resume to continue from "
                     f"{out / 'last'}")
    files = summary.get("files") or []
    lines.append(f"files written in {out}:" + ("" if files else " none"))
    groups: dict[str, list[str]] = {}
    for name in files:
        top, _, rest = name.partition("/")
        groups.setdefault(f"{top}/" if rest else "", []).append(rest or top)
    for top, names in sorted(groups.items()):
        lines.append(f"  {top}" + (" " if top else "") + " ".join(names))
    return "\n".join(lines)


def _yaml(cfg: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False)


def train(cfg: TrainConfig, resume: bool = False) -> dict:
    """Build a ``Trainer`` and run it, wrapped in a ``ResourceMonitor`` when one is available."""
    monitor_type: type[ResourceMonitor] | None
    try:
        from kronos_core.base.monitor import ResourceMonitor

        monitor_type = ResourceMonitor
    except ImportError:
        monitor_type = None
    trainer = Trainer(cfg, resume=resume)
    if not trainer.dist.is_main:
        return trainer.fit()
    if monitor_type is None:
        summary = trainer.fit()
    else:
        with monitor_type(label=f"train {cfg.kind}") as monitor:
            trainer.monitor = monitor
            summary = trainer.fit()
        try:
            monitor.report(str(Path(cfg.out) / "resources.json"))
            summary["files"] = written_files(Path(cfg.out))
            (Path(cfg.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        except Exception as exc:  # noqa: BLE001 - the report is extra, the run is done
            log.warning("resource report failed: %s", exc)
    print(report(summary), file=sys.stderr)
    return summary
