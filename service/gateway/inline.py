"""Inline candles (a request's ``series``) as arrays, each bad value named."""

from __future__ import annotations

import numpy as np

from service.common.schemas import FEATURE_NAMES, InlineSeries
from service.gateway.future import to_ns


def inline_arrays(s: InlineSeries, lookback: int) -> tuple[np.ndarray, np.ndarray]:
    """(values (L, 6) float32, timestamps (L,) datetime64[ns]) of an inline series, last
    ``lookback``.

    Raises ``ValueError`` naming the first bad value (``close[7] is NaN``, ``close[3] is
    null``: a JSON null, a missing value) or timestamp: the gateway reports it as this
    series' ``invalid_series`` error and forecasts the others.
    """
    rows = s.candles
    n = len(rows)
    raw = np.zeros((n, 6), dtype=np.float64)  # (L, 6); a null becomes NaN here
    null = np.zeros((n, 6), dtype=bool)  # (L, 6) the values given as null
    width = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)  # (L,) 5, 6 or 7
    for i, r in enumerate(rows):
        if None in r:
            null[i, : len(r) - 1] = [v is None for v in r[1:]]
        raw[i, : len(r) - 1] = r[1:]
    prices = raw[:, :4]  # (L, 4)
    raw[width == 5, 4] = 0.0  # no volume: volume = amount = 0
    no_amount = width <= 6
    raw[no_amount, 5] = raw[no_amount, 4] * prices[no_amount].mean(axis=1)
    with np.errstate(over="ignore"):
        values = raw.astype(np.float32)  # (L, 6); beyond float32's range becomes inf, caught below
    bad = ~np.isfinite(values)
    if bad.any():
        i, k = (int(x) for x in np.argwhere(bad)[0])
        if k == 5 and no_amount[i] and np.isfinite(values[i, :5]).all():
            raise ValueError(
                f"amount[{i}] was not given, and the derived volume × mean price ({raw[i, 5]:.3g}) "
                "is beyond float32 range; give the amount, or scale volume or prices"
            )
        what = (
            "null"
            if null[i, k]
            else "NaN"
            if np.isnan(raw[i, k])
            else "infinite or beyond float32 range"
        )
        raise ValueError(
            f"{FEATURE_NAMES[k]}[{i}] is {what} ({int(bad.sum())} bad value(s)); candles must be "
            "finite numbers"
        )
    try:
        ts = to_ns([r[0] for r in rows])
    except Exception as exc:  # out of the datetime64[ns] range (years 1677-2262), mixed time zones
        raise ValueError(f"timestamps: {exc}") from None
    steps = np.diff(ts.view(np.int64))  # (L-1,)
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0)) + 1
        how = "repeats" if steps[i - 1] == 0 else "is before"
        raise ValueError(
            f"timestamps must be strictly increasing: timestamps[{i}] = {rows[i][0]} {how} "
            f"timestamps[{i - 1}]"
        )
    return values[-lookback:], ts[-lookback:]
