"""Library-level ledger figures: disk per 1,000 recorded forecasts and time to record one
request of many symbols (``python -m kronos_core.ledger.bench``).

The records are synthetic (random-walk means and quantiles, horizon 24, 3 quantiles by
default); the files are what ``Ledger.record`` writes for the service's answers of that shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.ledger.ledger import Ledger
from kronos_core.ledger.records import CalibrationStamp, ForecastRecord, to_table


def synthetic_records(n_symbols: int, horizon: int = 24, quantiles=(0.1, 0.5, 0.9), seed: int = 0,
                      request_id: str = "bench") -> list[ForecastRecord]:
    """One request's records: ``n_symbols`` forecasts of ``horizon`` 5-minute steps."""
    rng = np.random.default_rng(seed)
    origin = pd.Timestamp("2026-06-01 10:00")
    # (H,)
    steps = pd.date_range(origin + pd.Timedelta(minutes=5), periods=horizon, freq="5min").to_numpy()
    stamp = CalibrationStamp(
        "aci", 7, "0" * 64, pd.Timestamp("2026-06-01", tz="UTC").to_pydatetime()
    )
    out = []
    for i in range(n_symbols):
        mean = 100 * np.exp(np.cumsum(rng.normal(0, 0.002, horizon)))  # (H,)
        width = 0.004 * np.sqrt(np.arange(1, horizon + 1))  # (H,)
        qs = {q: {"close": mean * np.exp(width * (q - 0.5) * 2.56)} for q in quantiles}
        out.append(
            ForecastRecord(
                request_id=request_id, symbol=f"SYM{i:05d}", origin=origin, timestamps=steps,
                mean={"close": mean}, quantiles=qs, model_sha256="ab" * 32,
                model_name="kronos-small", calibration=stamp, last_close=100.0, frequency="5min",
            )
        )
    return out


def run(n_symbols: int = 1000, horizon: int = 24, quantiles=(0.1, 0.5, 0.9), repeats: int = 5,
        root: Path | None = None) -> dict:
    """Record ``repeats`` requests of ``n_symbols`` forecasts; the disk per 1,000 forecasts
    and the time per request (median; building the records excluded; ``build_table_s``: the
    Arrow table alone, the rest is the Parquet write and its fsyncs)."""
    with tempfile.TemporaryDirectory() as tmp:
        led = Ledger(root or Path(tmp) / "ledger", writer_id="bench")
        times, sizes, build = [], [], []
        for r in range(repeats):
            recs = synthetic_records(n_symbols, horizon, quantiles, seed=r, request_id=f"bench-{r}")
            t0 = time.perf_counter()
            to_table(recs, led.features)
            build.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            path = led.record(recs)
            times.append(time.perf_counter() - t0)
            assert path is not None
            sizes.append(path.stat().st_size)
        t0 = time.perf_counter()
        rows = led.read().num_rows
        read_s = time.perf_counter() - t0
    per_1000 = statistics.median(sizes) * 1000 / n_symbols
    return {
        "symbols_per_request": n_symbols, "horizon": horizon, "quantiles": list(quantiles),
        "requests": repeats, "rows_per_request": n_symbols * horizon,
        "bytes_per_1000_forecasts": int(per_1000), "record_s_median": statistics.median(times),
        "record_s_max": max(times), "build_table_s_median": statistics.median(build),
        "read_all_s": read_s, "rows_read": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--symbols", type=int, default=1000)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dir", type=Path, help="ledger folder (default: a temporary one)")
    args = p.parse_args(argv)
    print(
        json.dumps(run(args.symbols, args.horizon, repeats=args.repeats, root=args.dir), indent=1)
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
