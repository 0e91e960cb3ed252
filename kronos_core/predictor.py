"""``KronosPredictor``: the reference's forecasting API on the cached, batched engine.

``predict`` / ``predict_batch`` keep the reference's arguments, defaults, input
rules and results (DataFrames); their arguments map to ``ForecastOptions`` once.
``forecast`` is the array API: ragged series and one ``ForecastOptions`` in, sample
paths, mean and quantiles out, with seeded batch-invariant sampling. ``start_forecast``
is the same call cut into decode steps (a ``ForecastJob``), for a scheduler that
interleaves several forecasts on one device; ``forecast`` is ``start_forecast`` run
to the end.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from kronos_core.base.candles import (
    FEATURES,
    CandleError,
    candle_array,
    denormalize,
    normalize,
    repair_candles,
    time_features,
)
from kronos_core.base.moves import MoveCorrection, correct_moves
from kronos_core.base.options import ForecastOptions, SamplingDefaults, quantile_column
from kronos_core.base.price_limits import (
    PriceLimitRule,
    limit_paths,
    limit_quantiles,
    limit_table,
)
from kronos_core.calibration.policy import correct
from kronos_core.engine.batch import assemble
from kronos_core.engine.config import EngineStats, GenerationConfig
from kronos_core.engine.generate import Generator
from kronos_core.engine.host_memory import keep_freed_memory
from kronos_core.engine.job import Generation, step_together
from kronos_core.engine.sampling import row_keys
from kronos_core.model import Kronos, KronosTokenizer

log = logging.getLogger(__name__)


# Rows (series x paths) of one forecast call for callers with many series, per device kind. A
# CPU's cost grows with a call's rows and wide calls gain nothing but memory: two daily series,
# 16 paths, 200 backtest rebalances took 13.7 s at 32 rows a call, 11.4 s at 128, 13.5 s at 512,
# 14.0 s at 2,048, and 8,192 rows a call peaked at 12 GB (docs/results/backtest.md). A GPU wants
# wide calls; its free memory caps them.
ROWS_PER_CALL = {"cpu": 128, "cuda": 16384}
GPU_CALL_MEMORY_SHARE = 0.8  # of the free GPU memory one such call may plan for

@dataclass
class ForecastResult:
    """Forecasts of B series, S sample paths each, H steps, 6 features (``FEATURES``), raw scale."""

    paths: np.ndarray  # (B, S, H, 6) float32 sample paths
    mean: np.ndarray  # (B, H, 6) float32 mean over the paths
    quantiles: np.ndarray  # (Q, B, H, 6) float32, Q = len(quantile_levels)
    quantile_levels: tuple[float, ...]  # the requested quantile levels
    stats: EngineStats  # timings and token counts of the engine run(s)
    # (B, H) the daily price-limit fraction each series' step was held to (inf: none); None:
    # no series had a limit (or the options turned them off)
    price_limits: np.ndarray | None = None
    # (2, H) the move correction's lambda and kappa applied per step (kronos_core.base.moves);
    # None: not applied (the model has none, or the options turned it off)
    moves: np.ndarray | None = None

    def to_frame(self, symbols: Sequence[str], timestamps: Sequence) -> pd.DataFrame:
        """Long format, one row per (symbol, step): ``symbol``, ``step`` (1 = the first forecast
        candle), ``timestamp``, the six mean columns (``FEATURES``), then ``<feature>_q<level>``
        per quantile level (``quantile_column``). ``symbols``: one name per series;
        ``timestamps``: each series' ``horizon`` future times (the forecast's y_timestamps).
        The served answer as a frame (``kronos_core.client.KronosClient``) has this layout, so
        local and served forecasts compare column for column."""
        b, h = self.mean.shape[:2]  # (B, H, 6)
        if len(symbols) != b or len(timestamps) != b:
            raise ValueError(
                f"{b} series forecast, but {len(symbols)} symbols and {len(timestamps)} "
                "timestamp arrays given"
            )
        data: dict[str, Any] = {
            "symbol": np.repeat(np.asarray(list(symbols), dtype=object), h),
            "step": np.tile(np.arange(1, h + 1, dtype=np.int32), b),
            "timestamp": np.concatenate(
                [np.asarray(pd.DatetimeIndex(t), "datetime64[ns]") for t in timestamps]
            ) if b else np.array([], "datetime64[ns]"),
        }
        for k, name in enumerate(FEATURES):
            data[name] = self.mean[:, :, k].reshape(-1).astype(np.float32)  # (B*H,)
        for qi, level in enumerate(self.quantile_levels):
            for k, name in enumerate(FEATURES):
                data[quantile_column(name, level)] = (
                    self.quantiles[qi, :, :, k].reshape(-1).astype(np.float32)  # (B*H,)
                )
        frame = pd.DataFrame(data)
        frame["symbol"] = frame["symbol"].astype(str)  # pandas' own text dtype (object or str)
        return frame


class ForecastJob:
    """One ``forecast`` call cut into decode steps: ``step()`` until ``done``, then ``result()``.

    Made by ``KronosPredictor.start_forecast`` (inputs checked and normalized there);
    ``result()`` is what ``forecast`` would have returned (paths, mean, quantiles,
    price limits, calibration and repair applied). ``close()`` frees the engine's caches of a
    cancelled forecast.
    """

    def __init__(self, predictor: KronosPredictor, generation: Generation, options: ForecastOptions,
                 n_series: int, means: np.ndarray, stds: np.ndarray,
                 limits: np.ndarray | None = None, last_close: np.ndarray | None = None):
        self.predictor, self.generation, self.options = predictor, generation, options
        self.n_series = n_series
        self.means, self.stds = means, stds  # (B, 6) each: the normalization of every series
        self.rows: int = generation.rows  # engine rows: series x sample paths
        self.limits = limits  # (B, H) price-limit fractions (inf: none), or None
        self.last_close = last_close  # (B,) each series' last observed close, with limits/moves
        self.moves: np.ndarray | None = None  # (2, H) lambda, kappa per step, or None

    @property
    def done(self) -> bool:
        return self.generation.done

    @property
    def steps_left(self) -> int:
        return self.generation.steps_left

    def step(self) -> None:
        """One decode step of the engine (the first also tokenizes and prefills; the last
        detokenizes)."""
        self.generation.step()

    @property
    def shares_steps(self) -> bool:
        """Whether the next step can share one decode step with other jobs
        (``KronosPredictor.step_together``)."""
        return self.generation.shares_steps

    def close(self) -> None:
        self.generation.close()

    def normalized_paths(self) -> np.ndarray:
        """(B, S, H, 6) float32 normalized sample paths; only when ``done``."""
        out = self.generation.result()
        o = self.options
        return (
            out.candles.cpu()
            .numpy()
            .reshape(self.n_series, o.sample_count, o.horizon, len(FEATURES))
        )

    def result(self) -> ForecastResult:
        """Sample paths, mean and quantiles, raw scale; only when ``done``."""
        norm, mean, std = self.normalized_paths(), self.means, self.stds
        options, predictor = self.options, self.predictor
        levels, calibration = options.quantiles, options.calibration
        # (B, S, H, 6)
        paths = denormalize(norm, mean[:, None, None, :], std[:, None, None, :]).astype(np.float32)
        limits, last, moves = self.limits, self.last_close, self.moves
        if moves is not None:  # centre and spread corrected first; the limits then hold them
            assert last is not None
            paths = correct_moves(paths, last, moves[0], moves[1])  # (B, S, H, 6)
        if limits is not None:
            assert last is not None
            paths = limit_paths(paths, last, limits)  # (B, S, H, 6)
        repair = predictor.repair if options.repair is None else options.repair
        if repair:
            paths = repair_candles(paths)
            path_mean = paths.mean(axis=1)
        else:
            # (B, H, 6)
            path_mean = denormalize(norm.mean(axis=1), mean[:, None, :], std[:, None, :])
            if moves is not None:  # the corrected (and limited) paths' mean
                path_mean = paths.mean(axis=1)
            elif limits is not None:  # the limited series' mean is their limited paths'
                held = np.isfinite(limits).any(axis=1)  # (B,)
                path_mean[held] = paths[held].mean(axis=1)
        qs = (
            np.quantile(paths, levels, axis=1).astype(np.float32)
            if levels
            else np.zeros((0, *path_mean.shape), dtype=np.float32)
        )
        # quantiles and paths, as kronos_core.calibration.policy says
        if calibration is not None and levels:
            # (B, S, H, 6), (Q, B, H, 6)
            corrected, qs = correct(calibration, paths, levels, predictor.identity)
            paths = corrected.astype(np.float32)
            if limits is not None:  # the widened bands stay where a limited path can go
                assert last is not None
                paths = limit_paths(paths, last, limits)
                qs = limit_quantiles(qs, last, limits)
        return ForecastResult(
            paths, path_mean.astype(np.float32), qs, levels, self.generation.stats, limits, moves
        )


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def series_key(values: np.ndarray) -> int:
    """A stable 64-bit key of a series' content, used to seed its sampling."""
    return int.from_bytes(
        hashlib.blake2b(np.ascontiguousarray(values).tobytes(), digest_size=8).digest(), "little"
    )


class KronosPredictor:
    """Forecast candles with a ``Kronos`` model and its ``KronosTokenizer``.

    device: None picks CUDA when available, else CPU. max_context: the longest
    window the model sees (512 for Kronos-small/base, 2048 for Kronos-mini).
    clip: normalized inputs are clipped to [-clip, clip]. sliding: "exact"
    (default, the reference's results), "rolling" (approximate, faster once
    the window slides) or "recompute" (the reference's algorithm, slow).
    dtype: autocast dtype on GPU (torch.bfloat16 / torch.float16); None = float32.
    compile: torch.compile the decode step. cuda_graphs: torch.compile the decode
    step with mode="reduce-overhead" (CUDA graphs) on a CUDA device; on a CPU it is
    ignored with a warning in the log. repair: make forecast candles consistent (off
    by default so results equal the reference's).
    """

    def __init__(
        self,
        model: Kronos,
        tokenizer: KronosTokenizer,
        device: str | torch.device | None = None,
        max_context: int = 512,
        clip: float = 5,
        *,
        sliding: str = "exact",
        dtype: torch.dtype | None = None,
        compile: bool = False,
        repair: bool = False,
        cuda_graphs: bool = False,
    ):
        self.device = torch.device(device) if device is not None else default_device()
        if self.device.type == "cpu":
            keep_freed_memory()  # tensors of a step reuse heap memory (engine/host_memory.py)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer.to(self.device).eval()
        self.generator = Generator(self.model, self.tokenizer)  # checks the bit widths match
        if max_context < 1:
            raise ValueError(f"max_context must be >= 1, got {max_context}")
        self.max_context = max_context
        self.clip = clip
        self.sliding = sliding
        self.dtype = dtype
        self.compile = compile
        self.cuda_graphs = cuda_graphs
        if cuda_graphs:  # logs once, here at load, when the device cannot use them (CPU: ignored)
            self.generator.graphs_active(GenerationConfig(1, cuda_graphs=True), self.device)
        self.repair = repair
        # the sampling settings of options that name none (a bundle's kronos.json "sampling",
        # set by kronos_core.loading; else the reference's)
        self.sampling = SamplingDefaults()
        # the fitted move correction (a bundle's kronos.json "moves", set by kronos_core.loading;
        # None: paths as sampled), applied unless options.move_correction is False
        self.moves: MoveCorrection | None = None
        # Any: kronos_core.loading (which imports this module) defines both types
        self.identity: Any = None  # ModelIdentity when built by kronos_core.loading
        # the PredictorConfig it was built from, when built by kronos_core.loading
        self.config: Any = None

    # ---- reference-compatible DataFrame API -----------------------------------------
    def predict(
        self, df, x_timestamp, y_timestamp, pred_len, T=1.0, top_k=0, top_p=0.9, sample_count=1,
        verbose=True,
    ) -> pd.DataFrame:
        """Forecast one series; returns a DataFrame indexed by ``y_timestamp`` (mean over sample
        paths)."""
        return self.predict_batch(
            [df], [x_timestamp], [y_timestamp], pred_len, T, top_k, top_p, sample_count, verbose
        )[0]

    def predict_batch(
        self,
        df_list,
        x_timestamp_list,
        y_timestamp_list,
        pred_len,
        T=1.0,
        top_k=0,
        top_p=0.9,
        sample_count=1,
        verbose=True,
    ) -> list[pd.DataFrame]:
        """Forecast several series in one batch (lookbacks may differ); one DataFrame each."""
        if not isinstance(df_list, (list, tuple)) or not df_list:
            raise ValueError("df_list must be a non-empty list of DataFrames")
        if len({len(df_list), len(x_timestamp_list), len(y_timestamp_list)}) != 1:
            raise ValueError(
                f"df_list, x_timestamp_list and y_timestamp_list have different lengths "
                f"({len(df_list)}, {len(x_timestamp_list)}, {len(y_timestamp_list)})"
            )
        arrays = []
        for i, df in enumerate(df_list):
            try:
                arrays.append(candle_array(df))
            except CandleError as exc:
                raise ValueError(f"series {i}: {exc}") from exc
        options = ForecastOptions(
            horizon=pred_len, sample_count=sample_count, temperature=T, top_k=top_k, top_p=top_p
        )
        job = self._start(arrays, x_timestamp_list, y_timestamp_list, options, None, verbose)
        while not job.done:
            job.step()
        norm, mean, _std = job.normalized_paths(), job.means, job.stds
        out = []
        for i, y_ts in enumerate(y_timestamp_list):
            preds = denormalize(norm[i].mean(axis=0), mean[i], _std[i])  # (H, 6)
            if self.repair:
                preds = repair_candles(preds)
            out.append(pd.DataFrame(preds, columns=list(FEATURES), index=y_ts))
        return out

    # ---- array API ----------------------------------------------------------------------
    def series_per_call(self, lookback: int, horizon: int, sample_count: int = 1) -> int:
        """Series one ``forecast`` call should carry when a caller has many (backtests,
        evaluation): ``ROWS_PER_CALL`` rows (series x paths) for this device kind, on a GPU
        within ``GPU_CALL_MEMORY_SHARE`` of its free memory."""
        cuda = self.device.type == "cuda"
        n = max(1, ROWS_PER_CALL["cuda" if cuda else "cpu"] // max(1, sample_count))
        if cuda:
            budget = int(torch.cuda.mem_get_info(self.device)[0] * GPU_CALL_MEMORY_SHARE)
            n = min(n, max(1, self.series_that_fit(budget, lookback, horizon, sample_count)))
        return n

    def series_that_fit(self, budget_bytes: int, lookback: int, horizon: int,
                        sample_count: int = 1) -> int:
        """The most series of ``lookback`` candles one ``forecast`` call of ``horizon`` steps and
        ``sample_count`` paths fits in ``budget_bytes`` of device memory, weights included (the
        engine's memory model; 0: not even one)."""
        from kronos_core.engine.memory import max_batch_that_fits

        return max_batch_that_fits(self.model.config, self.tokenizer.config, budget_bytes,
                                   lookback, horizon, sample_count, max_context=self.max_context)

    def forecast(
        self,
        series: Sequence[np.ndarray],
        x_timestamps: Sequence,
        y_timestamps: Sequence,
        options: ForecastOptions,
        *,
        series_keys: Sequence[int] | None = None,
        price_limits: Sequence[PriceLimitRule | None] | None = None,
        verbose: bool = False,
    ) -> ForecastResult:
        """Sample paths, mean and quantiles for ragged raw-scale series.

        series[i] (L_i, 6) in ``FEATURES`` order (volume/amount already filled);
        x_timestamps[i] L_i datetimes; y_timestamps[i] ``options.horizon`` datetimes.
        options: horizon, sampling, quantiles, repair, sliding and calibration
        (``kronos_core.base.options.ForecastOptions``). With a seed, each series' paths depend
        only on the seed and the series' key (``series_keys[i]``, default a hash of its
        values), not on the rest of the batch. A calibration (with quantile levels asked)
        corrects the quantiles and maps the sample paths onto the corrected distribution,
        the mean stays raw (``kronos_core.calibration.policy``); it is refused
        (``CalibrationMismatch``) when fitted for another model. ``price_limits[i]``: series i's
        daily price-limit rule (``kronos_core.base.price_limits.rule_for``; None: no limit):
        with ``options.price_limits`` its paths are held inside the limits step by step, and
        its mean and quantiles are the limited paths'. With ``options.move_correction`` and a
        fitted ``self.moves`` (a bundle's kronos.json "moves", ``kronos_core.base.moves``), each
        series' paths are re-centred and re-spread per step first, so the limits hold the
        corrected paths. Returns ``ForecastResult`` (shapes in its fields). (``predict`` and
        ``predict_batch`` keep the reference's results: no correction, no limits.)
        """
        job = self.start_forecast(
            series, x_timestamps, y_timestamps, options, series_keys=series_keys,
            price_limits=price_limits, verbose=verbose,
        )
        while not job.done:
            job.step()
        return job.result()

    @staticmethod
    def step_together(jobs: Sequence[object]) -> None:
        """One step of every job in ``jobs`` (``ForecastJob``s that each ``shares_steps``), their
        cached rows in one shared decode step (continuous batching,
        ``kronos_core.engine.shared_step``); each job's paths are what it gives stepped alone."""
        generations = []
        for job in jobs:
            if not isinstance(job, ForecastJob):
                raise TypeError(f"step_together takes ForecastJobs, got {type(job).__name__}")
            generations.append(job.generation)
        step_together(generations)

    def start_forecast(
        self,
        series: Sequence[np.ndarray],
        x_timestamps: Sequence,
        y_timestamps: Sequence,
        options: ForecastOptions,
        *,
        series_keys: Sequence[int] | None = None,
        price_limits: Sequence[PriceLimitRule | None] | None = None,
        verbose: bool = False,
    ) -> ForecastJob:
        """``forecast``'s arguments, checked and normalized; the engine has not run yet.

        Step the returned ``ForecastJob`` until ``done``, then ``result()`` is exactly what
        ``forecast`` returns (``forecast`` is this, run to the end).
        """
        if not isinstance(options, ForecastOptions):
            raise TypeError(
                "options must be a kronos_core.base.options.ForecastOptions, got "
                f"{type(options).__name__}"
            )
        if options.calibration is not None:
            options.calibration.check_model(self.identity)  # before spending time on the forecast
        arrays = [self._check_array(i, a) for i, a in enumerate(series)]
        if price_limits is not None and len(price_limits) != len(arrays):
            raise ValueError(
                f"price_limits has {len(price_limits)} entries for {len(arrays)} series"
            )
        job = self._start(arrays, x_timestamps, y_timestamps, options, series_keys, verbose)
        if options.price_limits and price_limits is not None:
            job.limits = limit_table(price_limits, x_timestamps, y_timestamps)  # (B, H) or None
        moves = self.moves
        if options.move_correction and moves is not None and not moves.is_identity(
                options.horizon):
            job.moves = np.stack(moves.steps(options.horizon))  # (2, H)
        if job.limits is not None or job.moves is not None:
            close = FEATURES.index("close")
            job.last_close = np.array([a[-1, close] for a in arrays], dtype=np.float64)  # (B,)
        return job

    # ---- shared path ------------------------------------------------------------------------
    @staticmethod
    def _check_array(i: int, a) -> np.ndarray:
        a = np.asarray(a, dtype=np.float32)
        if a.ndim != 2 or a.shape[1] != len(FEATURES) or a.shape[0] < 1:
            raise ValueError(f"series {i}: expected shape (L >= 1, {len(FEATURES)}), got {a.shape}")
        if not np.isfinite(a).all():
            rows = np.nonzero(~np.isfinite(a).all(axis=1))[0]
            raise CandleError(f"series {i}: non-finite values in rows {rows[:5].tolist()}")
        return a

    def _start(
        self, arrays, x_ts_list, y_ts_list, options: ForecastOptions, keys, verbose
    ) -> ForecastJob:
        """Normalize, assemble the engine batch -> a job not started yet (means, stds (B, 6)
        kept)."""
        options = options.with_defaults(self.sampling)  # None sampling settings: the model's
        horizon, sample_count = options.horizon, options.sample_count
        if len(x_ts_list) != len(arrays) or len(y_ts_list) != len(arrays):
            raise ValueError(
                f"got {len(arrays)} series but {len(x_ts_list)} history and {len(y_ts_list)} "
                "future timestamp lists"
            )
        cfg = GenerationConfig.from_options(
            options,
            max_context=self.max_context,
            sliding=self.sliding,
            autocast_dtype=self.dtype,
            compile=self.compile,
            progress=bool(verbose),
            cuda_graphs=self.cuda_graphs,
        )
        x_norm, means, stds, x_stamps, y_stamps = [], [], [], [], []
        for i, (a, xt, yt) in enumerate(zip(arrays, x_ts_list, y_ts_list)):
            if len(xt) != len(a):
                raise ValueError(f"series {i}: {len(a)} candles but {len(xt)} history timestamps")
            if len(yt) != horizon:
                raise ValueError(
                    f"series {i}: {len(yt)} future timestamps but pred_len is {horizon}"
                )
            xn, mu, sd = normalize(a, self.clip)
            x_norm.append(xn)
            means.append(mu)
            stds.append(sd)
            x_stamps.append(time_features(xt))
            y_stamps.append(time_features(yt))
        rkeys = None
        if options.seed is not None:
            if keys is None:
                keys = [series_key(a) for a in arrays]
            elif len(keys) != len(arrays):
                raise ValueError(f"series_keys has {len(keys)} entries for {len(arrays)} series")
            rkeys = row_keys(options.seed, [int(k) for k in keys], sample_count)
        batch = assemble(x_norm, x_stamps, y_stamps, sample_count, rkeys, self.device)
        generation = self.generator.start(batch, cfg)
        return ForecastJob(self, generation, options, len(arrays), np.stack(means), np.stack(stds))
