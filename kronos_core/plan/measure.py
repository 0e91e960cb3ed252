"""Measure what the planner predicts, on the CPU: peak memory and step time.

Training: a small ``Kronos`` built from its config, teacher-forced forward
(``Kronos.forward``), cross-entropy on s1 and s2, backward, AdamW step. The
peak is that of every tensor storage alive (``LiveTensorMeter`` around model
construction and two steps; the second step's peak is the steady state, the
first allocates the optimizer state). Step time is the median of un-metered
steps. Inference: ``KronosPredictor.forecast`` on random candles, metered the
same way (weights included, created inside the meter).

``kronos plan --measure-cpu`` prints the table; ``tests/plan/test_planner.py``
asserts the ±20% memory goal on the same configurations.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from kronos_core.engine.memory import LiveTensorMeter
from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig

TIME_TABLES = (60, 24, 7, 32, 13)
# The measurement times CPU seconds of one thread: on a machine shared with other jobs,
# wall time measures the neighbours; CPU time measures the work.
CLOCK = time.process_time


@dataclass(frozen=True)
class TrainCase:
    d_model: int
    n_layers: int
    n_heads: int
    ff_dim: int
    batch: int
    window: int
    precision: str = "fp32"
    checkpointing: bool = False
    bits: int = 10  # s1_bits = s2_bits (the published models: 10)

    @property
    def config(self) -> KronosConfig:
        return KronosConfig(
            s1_bits=self.bits, s2_bits=self.bits, n_layers=self.n_layers, d_model=self.d_model,
            n_heads=self.n_heads, ff_dim=self.ff_dim,
        )

    def label(self) -> str:
        extra = f" {self.precision}" + (" ckpt" if self.checkpointing else "") + (
            f" bits {self.bits}" if self.bits != 10 else "")
        return (f"d{self.d_model} L{self.n_layers} ff{self.ff_dim} batch {self.batch} window "
                f"{self.window}{extra}")


@dataclass(frozen=True)
class InferCase:
    d_model: int
    n_layers: int
    n_heads: int
    ff_dim: int
    batch: int
    lookback: int
    horizon: int
    samples: int = 1
    tok_d_model: int = 64
    bits: int = 10

    @property
    def config(self) -> KronosConfig:
        return KronosConfig(
            s1_bits=self.bits, s2_bits=self.bits, n_layers=self.n_layers, d_model=self.d_model,
            n_heads=self.n_heads, ff_dim=self.ff_dim,
        )

    @property
    def tokenizer_config(self) -> TokenizerConfig:
        td = self.tok_d_model
        return TokenizerConfig(
            d_in=6, d_model=td, n_heads=4, ff_dim=2 * td, n_enc_layers=2, n_dec_layers=2,
            s1_bits=self.bits, s2_bits=self.bits,
        )

    def label(self) -> str:
        return (
            f"d{self.d_model} L{self.n_layers} ff{self.ff_dim} {self.batch} series lookback "
            f"{self.lookback} horizon {self.horizon} samples {self.samples}"
        )


# The configurations the accuracy test and ``--measure-cpu`` measure (small enough for a 2-core
# CPU).
TRAIN_CASES = (
    TrainCase(128, 2, 4, 256, 8, 128),
    TrainCase(128, 4, 4, 512, 4, 256),
    TrainCase(256, 2, 4, 512, 4, 128),
    TrainCase(128, 4, 4, 512, 4, 256, checkpointing=True),
    TrainCase(128, 2, 4, 256, 8, 128, precision="bf16"),
)
INFER_CASES = (
    InferCase(128, 2, 4, 256, 8, 200, 16),
    InferCase(128, 4, 4, 256, 4, 128, 24, samples=2),
    InferCase(256, 2, 4, 512, 16, 96, 8),
)


def random_tokens(
    batch: int, length: int, seed: int = 0, bits: int = 10
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """s1, s2 (B, L) ids and stamps (B, L, 5) time features, all random."""
    g = torch.Generator().manual_seed(seed)
    s1 = torch.randint(0, 2**bits, (batch, length), generator=g)  # (B, L)
    s2 = torch.randint(0, 2**bits, (batch, length), generator=g)  # (B, L)
    stamp = torch.stack(
        [torch.randint(0, n, (batch, length), generator=g) for n in TIME_TABLES], -1
    ).float()
    return s1, s2, stamp  # stamp (B, L, 5)


def train_step(model: Kronos, opt: torch.optim.Optimizer, s1, s2, stamp, precision: str) -> float:
    """One teacher-forced step on (B, window + 1) tokens: predict tokens 1.. from tokens ..-1."""
    ctx = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bf16"
        else contextlib.nullcontext()
    )
    with ctx:
        l1, l2 = model(s1[:, :-1], s2[:, :-1], stamp[:, :-1], s1[:, 1:])  # (B, L, V1), (B, L, V2)
        loss = F.cross_entropy(l1.flatten(0, 1), s1[:, 1:].flatten()) + F.cross_entropy(
            l2.flatten(0, 1), s2[:, 1:].flatten()
        )
    del l1, l2
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def _build_trainable(case: TrainCase, seed: int):
    torch.manual_seed(seed)
    model = Kronos(case.config).train()
    if case.checkpointing:
        from torch.utils.checkpoint import checkpoint

        # the same per-block wrapping as training's grad_checkpointing
        for block in model.transformer:
            plain = type(block).forward
            block.forward = lambda *a, _b=block, _f=plain: checkpoint(
                _f, _b, *a, use_reentrant=False
            )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)


def measure_train_peak(case: TrainCase, seed: int = 0) -> int:
    """Peak bytes of all live tensors during the second training step (model and optimizer
    included)."""
    meter = LiveTensorMeter()
    with meter:
        model, opt = _build_trainable(case, seed)
        batch = random_tokens(case.batch, case.window + 1, seed, case.bits)
        train_step(model, opt, *batch, case.precision)  # allocates the optimizer state
        meter.peak = meter.current
        train_step(model, opt, *batch, case.precision)
    return meter.peak


def measure_step_seconds(
    case: TrainCase, steps: int = 3, seed: int = 0, clock=time.perf_counter
) -> float:
    """Median time of ``steps`` un-metered training steps (after one warm-up) on ``clock``."""
    model, opt = _build_trainable(case, seed)
    batch = random_tokens(case.batch, case.window + 1, seed, case.bits)
    train_step(model, opt, *batch, case.precision)
    times = []
    for _ in range(steps):
        t0 = clock()
        train_step(model, opt, *batch, case.precision)
        times.append(clock() - t0)
    return statistics.median(times)


def _forecast_inputs(
    case: InferCase, seed: int
) -> tuple[list[np.ndarray], list[pd.DatetimeIndex], list[pd.DatetimeIndex]]:
    rng = np.random.default_rng(seed)
    stamps = pd.date_range("2024-01-02 09:35", periods=case.lookback + case.horizon, freq="5min")
    values = [
        np.abs(rng.normal(10, 1, (case.lookback, 6))).astype(np.float32) for _ in range(case.batch)
    ]
    return values, [stamps[: case.lookback]] * case.batch, [stamps[case.lookback:]] * case.batch


def measure_infer_peak(case: InferCase, seed: int = 0) -> int:
    """Peak bytes of all live tensors of one forecast call (weights created inside the meter)."""
    from kronos_core.base.options import ForecastOptions
    from kronos_core.predictor import KronosPredictor

    data = _forecast_inputs(case, seed)
    meter = LiveTensorMeter()
    with meter:
        torch.manual_seed(seed)
        model, tok = Kronos(case.config).eval(), KronosTokenizer(case.tokenizer_config).eval()
        predictor = KronosPredictor(model, tok, device="cpu", max_context=512)
        predictor.forecast(*data, ForecastOptions(case.horizon, sample_count=case.samples, seed=1))
    return meter.peak


def measure_infer_seconds(case: InferCase, seed: int = 0, clock=time.perf_counter) -> float:
    from kronos_core.base.options import ForecastOptions
    from kronos_core.predictor import KronosPredictor

    torch.manual_seed(seed)
    predictor = KronosPredictor(
        Kronos(case.config).eval(), KronosTokenizer(case.tokenizer_config).eval(), device="cpu",
        max_context=512,
    )
    data = _forecast_inputs(case, seed)
    values, xs, ys = data
    # warm-up
    predictor.forecast(
        values, xs, [y[:2] for y in ys], ForecastOptions(2, sample_count=case.samples, seed=1)
    )
    t0 = clock()
    predictor.forecast(*data, ForecastOptions(case.horizon, sample_count=case.samples, seed=1))
    return clock() - t0


def compare_train(case: TrainCase, device=None) -> dict:
    """Planner against measurement for one training case (memory; time too when ``device`` is
    given)."""
    from kronos_core.plan.planner import plan_training
    from kronos_core.plan.roofline import train_step_seconds

    plan = plan_training(
        case.config, None, case.window, case.batch, case.precision, case.checkpointing,
        include_tokenizer=False, foreach_optimizer=False,
    )
    row: dict[str, Any] = {
        "case": case.label(), "estimate_bytes": plan.total,
        "measured_bytes": measure_train_peak(case),
    }
    row["memory_error"] = row["estimate_bytes"] / row["measured_bytes"] - 1
    if device is not None:
        row["estimate_s"] = train_step_seconds(case.config, plan, device)["total"]
        row["measured_s"] = measure_step_seconds(case, clock=CLOCK)
        row["time_error"] = row["estimate_s"] / row["measured_s"] - 1
    return row


def compare_infer(case: InferCase, device=None) -> dict:
    from kronos_core.plan.planner import plan_inference
    from kronos_core.plan.roofline import infer_seconds

    plan = plan_inference(
        case.config, case.tokenizer_config, case.lookback, case.horizon, case.batch, case.samples,
        ragged=False,
    )
    row: dict[str, Any] = {
        "case": case.label(), "estimate_bytes": plan.total,
        "measured_bytes": measure_infer_peak(case),
    }
    row["memory_error"] = row["estimate_bytes"] / row["measured_bytes"] - 1
    if device is not None:
        row["estimate_s"] = infer_seconds(
            case.config, case.tokenizer_config, plan, case.batch, device
        )["total"]
        row["measured_s"] = measure_infer_seconds(case, clock=CLOCK)
        row["time_error"] = row["estimate_s"] / row["measured_s"] - 1
    return row


def measure_cpu(as_json: bool = False) -> int:
    """``kronos plan --measure-cpu``: every case's memory and time, estimate against measured."""
    import json

    from tqdm import tqdm

    from kronos_core.plan.roofline import probe_cpu

    torch.set_num_threads(1)
    device = probe_cpu(clock=CLOCK)
    cases: list[tuple[str, TrainCase | InferCase]] = [("train", c) for c in TRAIN_CASES] + [
        ("infer", c) for c in INFER_CASES
    ]
    rows = []
    for kind, case in tqdm(cases, desc="measuring", unit="case", disable=as_json):
        # = kind
        row = (
            compare_train(case, device)
            if isinstance(case, TrainCase)
            else compare_infer(case, device)
        )
        rows.append({"mode": kind, **row})
        if not as_json:
            tqdm.write(_row_text(rows[-1]))
    if as_json:
        print(json.dumps({"device": device.source, "cpu_flops": device.fp32_flops,
                          "cpu_bandwidth": device.bandwidth, "rows": rows}, indent=2))
        return 0
    print(
        f"CPU peaks ({device.source}; CPU time of one thread): {device.fp32_flops / 1e9:.1f} "
        f"GFLOP/s, {device.bandwidth / 1e9:.1f} GB/s"
    )
    print(f"{'mode':5} {'configuration':58} {'est MiB':>8} {'meas MiB':>8} {'err':>6}   "
          f"{'est s':>7} {'meas s':>7} {'err':>6}")
    for r in rows:
        print(_row_text(r))
    worst = max(abs(r["memory_error"]) for r in rows)
    print(f"worst memory error {worst:.0%} (goal <= 20%)")
    return 0


def _row_text(r: dict) -> str:
    return (
        f"{r['mode']:5} {r['case']:58} {r['estimate_bytes'] / 2**20:8.1f} "
        f"{r['measured_bytes'] / 2**20:8.1f} {r['memory_error']:+6.0%}   {r['estimate_s']:7.3f} "
        f"{r['measured_s']:7.3f} {r['time_error']:+6.0%}"
    )
