"""The sample store: the bundled real series plus a synthetic universe of 5-minute candles.

Reproducible from a seed: the same ``(n_symbols, seed, n_candles)`` gives the same
candles on any machine (numpy's PCG64 ``default_rng``). ``default_sample_store()``
builds the embedded default once into a cache directory and reuses it.

Synthetic candles: GARCH(1,1) volatility clustering with Student-t innovations
(heavy tails), a U-shaped intraday volatility and volume profile, overnight gaps,
prices from about 2 to 500 (log-uniform) rounded to a 0.01 tick, volume in lots
that follows volatility, and two session calendars: Shanghai-style
(09:30-11:30 and 13:00-15:00, candles stamped at their close, lunch break) and
New-York-style (09:30-16:00), Monday to Friday. About one symbol in ten has a
shorter history (a later listing).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from kronos_core.data.fileformat import (
    SymbolLock,
    file_metadata,
    symbol_file,
    to_table,
    write_arrow_atomic,
)
from kronos_core.data.snapshot import SNAPSHOT_NAME
from kronos_core.data.store import KlineStore
from kronos_core.data.validate import validate_candles

log = logging.getLogger(__name__)

# bump when the store's content changes (3: the A-share series left the bundled data, so a
# cached v2 store, which holds it, is not reused)
SAMPLE_VERSION = 3
MANIFEST = "_sample_store.json"
DEFAULT_N_SYMBOLS = 2000
DEFAULT_N_CANDLES = 1000
DEFAULT_SEED = 0
DEFAULT_END = "2024-08-30"
REAL_DIR = Path(__file__).with_name("real")

@dataclass(frozen=True)
class RealSeries:
    """One bundled real series: its file in ``REAL_DIR`` and the metadata it is stored with.
    ``exchange``: the venue's ISO MIC, for exchange-calendar future timestamps (None for FX,
    which has no exchange); ``session_timezone``: the clock its sessions follow when not
    its stamps' ``timezone``."""

    file: str
    frequency: str
    timezone: str
    session_timezone: str | None
    exchange: str | None
    source: str


REAL_SERIES: dict[str, RealSeries] = {
    "GOOG": RealSeries(
        "goog_daily.csv", "1d", "America/New_York", None, "XNAS",
        "GOOG daily, test data of the PyPI package backtesting",
    ),
    "EURUSD": RealSeries(
        "eurusd_hourly.csv", "1h", "UTC", "America/New_York", None,
        "EUR/USD hourly, test data of the PyPI package backtesting",
    ),
    "SPX": RealSeries(
        "sp500_daily.csv", "1d", "America/New_York", None, "XNYS",
        "S&P 500 index daily, data of the PyPI package arch",
    ),
}

# session templates: (name, timezone, candle close times in minutes after midnight, lot size)
_CN_TIMES = np.concatenate(
    [np.arange(9 * 60 + 35, 11 * 60 + 31, 5), np.arange(13 * 60 + 5, 15 * 60 + 1, 5)]
)
_US_TIMES = np.arange(9 * 60 + 35, 16 * 60 + 1, 5)
SESSIONS = (("CN", "Asia/Shanghai", _CN_TIMES, 100.0), ("US", "America/New_York", _US_TIMES, 1.0))


def _calendar(times: np.ndarray, n: int, end: str) -> np.ndarray:
    """The last ``n`` 5-minute candle times (int64 ns) of Monday-Friday sessions ending on
    ``end``."""
    per_day = len(times)
    n_days = -(-n // per_day)
    days = pd.bdate_range(end=end, periods=n_days).as_unit("ns").asi8
    ts = (days[:, None] + times[None, :].astype(np.int64) * 60 * 10**9).ravel()
    return ts[-n:]


def _simulate(
    rng: np.random.Generator, times: np.ndarray, n_sym: int, n: int, lot: float
) -> np.ndarray:
    """(n_sym, n, 6) float64 OHLCV+amount candles for one session calendar."""
    per_day = len(times)
    start_pos = (per_day - n % per_day) % per_day  # the calendar is cut at the front
    pos = (np.arange(n) + start_pos) % per_day
    x = pos / max(per_day - 1, 1)
    profile = 0.6 + 2.4 * (2 * x - 1) ** 2  # U shape: busy open and close
    profile /= profile.mean()
    day_open = pos == 0

    ann_vol = rng.uniform(0.15, 0.8, n_sym)
    bar_var = (ann_vol**2) / (252 * per_day)
    alpha = rng.uniform(0.04, 0.1, n_sym)
    beta = rng.uniform(0.85, 0.94, n_sym) * (1 - alpha)
    beta = np.minimum(beta, 0.985 - alpha)
    omega = bar_var * (1 - alpha - beta)
    dof = rng.uniform(3.0, 6.0, n_sym)
    z = rng.standard_t(dof[:, None], size=(n_sym, n)) / np.sqrt(dof / (dof - 2))[:, None]

    r = np.empty((n_sym, n))
    sig = np.empty((n_sym, n))
    var = bar_var.copy()
    prev = np.zeros(n_sym)
    for t in range(n):
        var = omega + alpha * prev**2 + beta * var
        s = np.sqrt(var) * np.sqrt(profile[t])
        if day_open[t]:
            s = s * 3.0  # overnight news
        sig[:, t] = s
        prev = s * z[:, t]
        r[:, t] = prev

    p0 = np.exp(rng.uniform(np.log(2.0), np.log(500.0), n_sym))
    close = p0[:, None] * np.exp(np.cumsum(r, axis=1))
    open_ = np.concatenate([p0[:, None], close[:, :-1]], axis=1)
    wick = np.abs(rng.normal(0, 0.6, (n_sym, n, 2))) * sig[:, :, None]
    tick = 0.01
    close = np.maximum(np.round(close / tick) * tick, tick)
    open_ = np.maximum(np.round(open_ / tick) * tick, tick)
    high = np.round(np.maximum(open_, close) * np.exp(wick[..., 0]) / tick) * tick
    low = np.round(np.minimum(open_, close) * np.exp(-wick[..., 1]) / tick) * tick
    high = np.maximum(high, np.maximum(open_, close))
    low = np.maximum(np.minimum(low, np.minimum(open_, close)), tick / 2)

    base = np.exp(rng.normal(np.log(2000.0), 1.0, n_sym))
    activity = (sig / sig.mean(axis=1, keepdims=True)) ** 0.8
    volume = np.round(
        base[:, None] * profile[None, :] * activity * rng.lognormal(0, 0.35, (n_sym, n))
    )
    vwap = (open_ + high + low + close) / 4
    amount = np.round(volume * lot * vwap * rng.normal(1.0, 0.002, (n_sym, n)), 2)
    return np.stack([open_, high, low, close, volume, amount], axis=-1)


def _write_real(store: KlineStore) -> list[str]:
    done = []
    for symbol, real in REAL_SERIES.items():
        df = pd.read_csv(REAL_DIR / real.file)
        frame, _, _ = validate_candles(df, source=real.file)
        extra = {
            "session_timezone": real.session_timezone,
            "exchange": real.exchange,
            "market": "real",
            "file": f"kronos_core/data/real/{real.file}",
        }
        store.write(
            symbol,
            frame,
            frequency=real.frequency,
            timezone=real.timezone,
            source=real.source,
            overwrite=True,
            extra_metadata=extra,
            fsync=False,
        )
        done.append(symbol)
    return done


def build_sample_store(
    out_dir: str | os.PathLike,
    n_symbols: int = DEFAULT_N_SYMBOLS,
    seed: int = DEFAULT_SEED,
    n_candles: int = DEFAULT_N_CANDLES,
    *,
    include_real: bool = True,
    end: str = DEFAULT_END,
    prefix: str = "SYN",
    fsync: bool = False,
    progress: bool = False,
) -> Path:
    """Write a sample store at ``out_dir``: the real series (``include_real``) and
    ``n_symbols`` synthetic 5-minute symbols ``SYN0000...`` of up to ``n_candles``
    candles each, ending on ``end``. Returns ``out_dir``.

    Files are written atomically one by one; ``fsync`` (off by default: a generated
    store can be regenerated) makes each durable before it appears. Every frequency
    directory is then compacted into its read snapshot (``KlineStore.compact``).
    """
    out = Path(out_dir)
    n_symbols, n_candles = int(n_symbols), int(n_candles)
    if n_symbols < 0 or n_candles < 2:
        raise ValueError("n_symbols must be >= 0 and n_candles >= 2")
    out.mkdir(parents=True, exist_ok=True)
    store = KlineStore(out)
    real = _write_real(store) if include_real else []

    rng = np.random.default_rng(seed)
    market = rng.choice(len(SESSIONS), size=n_symbols, p=[0.7, 0.3])
    short = rng.random(n_symbols) < 0.1
    lengths = np.where(
        short, rng.integers(min(100, n_candles), n_candles + 1, n_symbols), n_candles
    )
    width = max(4, len(str(max(n_symbols - 1, 0))))
    directory = out / "5min"
    directory.mkdir(exist_ok=True)
    bar = tqdm(total=n_symbols, desc="sample store", unit="symbol", disable=not progress)
    for m, (name, tz, times, lot) in enumerate(SESSIONS):
        idx = np.flatnonzero(market == m)
        if len(idx) == 0:
            continue
        ts = _calendar(times, n_candles, end)
        candles = _simulate(np.random.default_rng([seed, m]), times, len(idx), n_candles, lot)
        for k, i in enumerate(idx):
            symbol = f"{prefix}{i:0{width}d}"
            L = int(lengths[i])
            meta = file_metadata(
                {"session_timezone": None, "exchange": None, "market": name}, symbol=symbol,
                frequency="5min", timezone=tz, ts=ts[-L:],
                source=f"synthetic (kronos sample store v{SAMPLE_VERSION}, seed {seed})",
            )
            # a fresh directory nobody else writes: no per-symbol lock needed
            table = to_table(ts[-L:], candles[k, -L:], meta)
            write_arrow_atomic(symbol_file(directory, symbol), table, fsync=fsync)
            bar.update(1)
    bar.close()
    KlineStore(out).compact(fsync=fsync)
    manifest = {
        "sample_version": SAMPLE_VERSION,
        "seed": seed,
        "n_symbols": n_symbols,
        "n_candles": n_candles,
        "end": end,
        "real_symbols": real,
        "real_source": "kronos_core/data/real/README.md",
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def cache_dir() -> Path:
    """``$KRONOS_HOME``, else ``$XDG_CACHE_HOME/kronos``, else ``~/.cache/kronos``."""
    home = os.environ.get("KRONOS_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kronos"


def default_sample_store(
    n_symbols: int = DEFAULT_N_SYMBOLS, seed: int = DEFAULT_SEED, n_candles: int = DEFAULT_N_CANDLES
) -> Path:
    """The embedded default store, generated on first use into ``cache_dir()``.

    It is built in a temporary directory beside its final place and renamed into
    place in one step, under a lock: concurrent callers wait and then share it, and
    nobody ever sees a half-built store. A store built before read snapshots existed
    is compacted once.
    """
    root = cache_dir()
    final = root / f"sample-store-v{SAMPLE_VERSION}-seed{seed}-n{n_symbols}-c{n_candles}"
    if (final / MANIFEST).is_file() and (final / "5min" / SNAPSHOT_NAME).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with SymbolLock(root, final.name):
        if (final / MANIFEST).is_file():
            if not (final / "5min" / SNAPSHOT_NAME).is_file():
                KlineStore(final).compact(fsync=False)
            return final
        if final.exists():  # an incomplete leftover (e.g. files deleted by hand)
            trash = root / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.trash"
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        tmp = root / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        log.info("building the sample store (%d symbols) in %s", n_symbols, final)
        try:
            build_sample_store(tmp, n_symbols=n_symbols, seed=seed, n_candles=n_candles)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
