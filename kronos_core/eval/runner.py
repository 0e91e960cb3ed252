"""What ``kronos eval`` and ``kronos calibrate`` share: flags, loading, windows and forecasts."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kronos_core.base.moves import MoveCorrection
from kronos_core.base.options import POINT_FORECASTS, SamplingDefaults
from kronos_core.eval.baselines import season_length
from kronos_core.eval.data import Series, load_series
from kronos_core.eval.scoring import DEFAULT_COVERAGE, DEFAULT_QUANTILES
from kronos_core.eval.windows import Windows, build_windows, forecast_windows

log = logging.getLogger(__name__)


def floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def add_window_arguments(parser: argparse.ArgumentParser, several_horizons: bool = False) -> None:
    """Data, windowing and sampling flags (the same for eval and calibrate); ``several_horizons``:
    ``--horizon`` takes one or more values (eval)."""
    g = parser.add_argument_group("data and windows")
    g.add_argument("--data", nargs="+", help="CSV/Parquet files (one series each), store folders "
                   "or one frequency folder of a store (STORE/5min) (or --corpus DIR)")
    g.add_argument("--eval-from", dest="eval_from_text", metavar="DATE_OR_CSV",
                   help="--data: split each series as the corpus does: evaluation windows at or "
                        "after this time (or a CSV of symbol,eval_from per series), calibration "
                        "windows before it")
    g.add_argument("--symbols", nargs="+",
                   help="symbols to take from a store or the corpus (default: all)")
    add_file_arguments(parser)
    add_corpus_arguments(parser)
    g.add_argument(
        "--lookback", type=int, default=256, help="context candles per window (default 256)"
    )
    if several_horizons:
        g.add_argument("--horizon", type=int, nargs="+", required=True,
                       help="candles forecast per window; several (--horizon 1 5): forecast once "
                            "at the longest, each scored on its first h steps")
    else:
        g.add_argument("--horizon", type=int, required=True, help="candles forecast per window")
    g.add_argument("--windows", "--windows-per-series", dest="windows", type=int, default=50,
                   help="windows per series: counted back from the end (files), spread over each "
                        "series' evaluation period (corpus eval), or the last ones before it "
                        "(corpus calibrate)")
    g.add_argument(
        "--step", type=int,
        help="rows between origins (default: the horizon, non-overlapping truths)",
    )
    g.add_argument("--start", help="only origins at or after this time")
    g.add_argument("--end", help="only windows whose truth ends before this time")
    g.add_argument(
        "--last-fraction", type=float,
        help="only origins in the last FRACTION of each series (e.g. data a model was not trained "
             "on)",
    )
    g.add_argument(
        "--sample-count", type=int,
        help="sample paths per window (default: the model's, kronos.json 'sampling'; "
             f"{EVAL_PATHS} for a model without one)")
    g.add_argument("--temperature", "-T", type=float,
                   help="softmax temperature (default: the model's; 1 for a model without one)")
    g.add_argument("--top-p", type=float,
                   help="nucleus mass, 1: off (default: the model's; 0.9 for a model without one)")
    g.add_argument("--point", choices=POINT_FORECASTS,
                   help="the model's point forecast: the mean or the median of its paths "
                        "(default: the model's; the mean for a model without one)")
    g.add_argument(
        "--seed", type=int, default=0, help="sampling seed (per window content, batch-invariant)"
    )
    g.add_argument(
        "--batch-size", type=int, default=None,
        help="windows per engine call (default: sized by rows for the device, 128 rows of "
             "windows x paths on a CPU, 16,384 on a GPU within its memory)"
    )
    g.add_argument(
        "--quantiles", type=floats, default=DEFAULT_QUANTILES,
        help="quantile levels for pinball loss",
    )
    g.add_argument(
        "--coverage", type=floats, default=DEFAULT_COVERAGE, help="central interval levels"
    )
    g.add_argument(
        "--no-price-limits", dest="price_limits", action="store_false",
        help="paths as sampled: not held inside the daily price limit of a Shanghai, Shenzhen "
        "or Beijing stock (docs/price-limits.md)")
    g.add_argument(
        "--no-move-correction", dest="move_correction", action="store_false",
        help="the model's paths without its fitted move correction (kronos.json 'moves', "
        "kronos tune-moves), to compare")
    g.add_argument(
        "--paths-cache", type=Path, metavar="DIR",
        help="keep the sample paths of each window set in DIR (keyed by model, windows' content, "
        "sample count, seed) and reuse them on a rerun instead of forecasting again",
    )


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """``--corpus`` and its filters (``--symbols`` is the data group's own flag); what they
    select: ``kronos_core.eval.sources``."""
    g = parser.add_argument_group(
        "corpus (a folder of instruments.csv + Parquet files; instead of --data)"
    )
    g.add_argument("--corpus", type=Path, metavar="DIR",
                   help="a corpus folder (instruments.csv + Parquet); its hold-out rules apply")
    g.add_argument("--split", choices=("train", "holdout_instrument"),
                   help="corpus: only train instruments (scored on their evaluation period) or "
                        "only held-out instruments (default: both)")
    g.add_argument("--market", nargs="+", metavar="MARKET",
                   help="corpus: only these markets (US, CN, FX, crypto, ...)")
    g.add_argument("--frequency", nargs="+", metavar="FREQ",
                   help="corpus: only these bar sizes (1d, 1h, 5min, 1min)")
    g.add_argument("--max-series-per-group", type=int, metavar="N",
                   help="corpus: at most N series per (market, frequency, hold-out), the first by "
                        "SHA-256 of the symbol (default: all)")


EVAL_PATHS = 32  # paths per window for a model whose kronos.json names no sample count


@dataclass(frozen=True)
class Sampling:
    """The sampling settings one model is evaluated with: each flag given, else the model's
    (``predictor.sampling``, from its kronos.json), else the reference's (32 paths for eval)."""

    sample_count: int
    temperature: float
    top_p: float
    point: str
    source: str  # "flags", the model's kronos.json, or "reference defaults"

    def describe(self) -> str:
        return (f"{self.sample_count} paths, temperature {self.temperature:g}, top-p "
                f"{self.top_p:g}, point forecast the {self.point} ({self.source})")

    def as_dict(self) -> dict:
        return {"sample_count": self.sample_count, "temperature": self.temperature,
                "top_p": self.top_p, "point": self.point, "source": self.source}


def sampling_for(args, predictor) -> Sampling:
    """``predictor``'s evaluation settings under ``args`` (module docstring of ``Sampling``)."""
    model = getattr(predictor, "sampling", None) or SamplingDefaults()
    own = model.source != SamplingDefaults().source  # the model's kronos.json names them
    given = {name: getattr(args, name, None)
             for name in ("sample_count", "temperature", "top_p", "point")}
    paths = given["sample_count"] or (model.sample_count if own else EVAL_PATHS)
    source = model.source if own else "reference defaults"
    if any(v is not None for v in given.values()):
        source = "flags" if all(v is not None for v in given.values()) else f"flags + {source}"
    return Sampling(int(paths), float(given["temperature"] or model.temperature),
                    float(given["top_p"] or model.top_p), given["point"] or model.point, source)


@dataclass
class WalkForward:
    """Windows of the loaded series and the model's sample paths on them."""

    series: list[Series]
    windows: Windows
    paths: np.ndarray  # (N, S, H, 6)
    seconds: float  # forecasting time

    @property
    def windows_per_second(self) -> float:
        return len(self.windows) / self.seconds if self.seconds > 0 else float("nan")

    def seasons(self) -> list[int | None]:
        return [season_length(s.timestamps) for s in self.series]


def add_file_arguments(parser: argparse.ArgumentParser) -> None:
    """How candle files are read: the flags of ``kronos forecast`` and ``kronos import``
    (``--time-column``, ``--column``, ``--sort``, ``--drop-nan``, ...), and the old
    ``--timestamp-column`` spelling, hidden."""
    from kronos_core.data.reader import add_reader_arguments

    add_reader_arguments(parser)
    # old spelling
    parser.add_argument("--timestamp-column", dest="time_column", help=argparse.SUPPRESS)


def read_options(args):
    """``ReadOptions`` of the flags of ``add_file_arguments``; a bad ``--column`` is a
    ``DataError``."""
    from kronos_core.base.candles import CandleError
    from kronos_core.data.reader import read_options_from_args
    from kronos_core.eval.data import DataError

    try:
        return read_options_from_args(args)
    except CandleError as exc:
        raise DataError(str(exc)) from exc


def load_data(args) -> list[Series]:
    return load_series(args.data, args.symbols, read_options(args))


def cache_key(identity, w: Windows, horizon: int, sampling: Sampling, seed: int,
              price_limits: bool = True, moves: MoveCorrection | None = None) -> str:
    """Hex digest naming one window set's forecasts: the model's weights, every window's
    context and stamps, the horizon, sample count, temperature, top-p, seed, the price-limit
    rules and the move correction applied (not the batch size: seeding is per window
    content)."""
    h = hashlib.sha256()
    key = {"model": getattr(identity, "sha256", None), "horizon": horizon,
           "sample_count": sampling.sample_count, "seed": seed,
           "temperature": sampling.temperature, "top_p": sampling.top_p}
    rules = [None if r is None else r.as_dict() for r in w.price_limits] if price_limits else []
    if any(r is not None for r in rules):  # a key without limits stays what it was
        key["price_limits"] = rules
    if moves is not None and not moves.is_identity(horizon):  # a key without it stays the same
        key["moves"] = [list(moves.lam), list(moves.kappa)]
    h.update(json.dumps(key).encode())
    h.update(np.ascontiguousarray(w.context, dtype=np.float32).tobytes())
    for ts in w.context_ts:
        h.update(np.asarray(ts.asi8).tobytes())
    return h.hexdigest()[:24]


def walk_forward(
    args, predictor, series: list[Series], start=None, end=None, windows=None
) -> WalkForward:
    """Build the windows from ``args`` and forecast them all in batches (or read them from
    ``args.paths_cache`` when the same windows were forecast before with the same model).
    ``start`` / ``end``: a time, or one per series."""
    w = build_windows(series, args.lookback, args.horizon, windows or args.windows, args.step,
                      start=start, end=end, last_fraction=args.last_fraction)
    paths, secs = forecast_paths(args, predictor, w, args.horizon)
    return WalkForward(series, w, paths, secs)


def forecast_paths(args, predictor, w: Windows, horizon: int,
                   sampling: Sampling | None = None) -> tuple[np.ndarray, float]:
    """Sample paths (N, S, H, 6) of windows ``w`` and the seconds spent, through
    ``args.paths_cache`` when it is set (keyed by model, windows, horizon, sampling, seed).
    ``sampling``: the settings (default: ``sampling_for(args, predictor)``)."""
    sampling = sampling or sampling_for(args, predictor)
    log.info("%d windows, lookback %d, horizon %d, %s, batches of %s, model %s",
             len(w), args.lookback, horizon, sampling.describe(), args.batch_size or "auto",
             getattr(predictor.identity, "name", "model"))
    cache = getattr(args, "paths_cache", None)
    limits = getattr(args, "price_limits", True)
    correct = getattr(args, "move_correction", True)
    moves = getattr(predictor, "moves", None) if correct else None
    file = None
    if cache is not None:
        key = cache_key(predictor.identity, w, horizon, sampling, args.seed, limits, moves)
        file = Path(cache) / f"paths-{key}.npz"
        if file.is_file():
            log.info("sample paths of these %d windows read from %s", len(w), file)
            with np.load(file) as z:
                return z["paths"], float(z["seconds"])
    paths, secs = forecast_windows(predictor, w, horizon, sampling.sample_count, args.seed,
                                   args.batch_size, temperature=sampling.temperature,
                                   top_p=sampling.top_p, price_limits=limits,
                                   move_correction=correct)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, paths=paths, seconds=secs)
    return paths, secs


def window_times(wf: WalkForward) -> tuple[np.ndarray, np.ndarray]:
    """Per window (int64 ns): when it is issued (its last context candle) and when its truth is
    fully known (its last truth candle, read from the series)."""
    w, h = wf.windows, wf.windows.truth.shape[1]
    issued = np.array([ts[-1].value for ts in w.context_ts], dtype=np.int64)
    resolved = np.array(
        [wf.series[k].timestamps[o + h - 1].value for k, o in zip(w.series_index, w.origins)],
        dtype=np.int64,
    )
    return issued, resolved


def data_section(args, wf: WalkForward, horizon: int | None = None) -> dict:
    counts = np.bincount(wf.windows.series_index, minlength=len(wf.series))
    return {
        "series": [
            {
                "name": s.name, "source": s.source, "rows": len(s), "windows": int(c),
                "first": str(s.timestamps[0]), "last": str(s.timestamps[-1]),
                "season": season_length(s.timestamps),
            }
            for s, c in zip(wf.series, counts)
        ],
        "lookback": args.lookback, "horizon": horizon or args.horizon, "windows": len(wf.windows),
        "step": args.step or horizon or args.horizon,
        "sample_count": args.sample_count or sampling_for(args, None).sample_count,
        "seed": args.seed,
        "start": args.start, "end": args.end, "last_fraction": args.last_fraction,
        "feature": "close", "quantiles": list(args.quantiles),
        "coverage_levels": list(args.coverage),
    }
