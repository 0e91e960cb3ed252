"""The exchanges' daily price-limit rules (kronos_core.base.price_limits): which rule a symbol
gets, the band of each forecast step by its date, and sample paths held inside the bands."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.price_limits import (
    PriceLimitRule,
    limit_envelope,
    limit_paths,
    limit_quantiles,
    limit_table,
    parse_flag,
    rule_for,
)


def _days(start: str, n: int) -> np.ndarray:
    return pd.bdate_range(start, periods=n).to_numpy()


@pytest.mark.parametrize("symbol, meta, board", [
    ("600518.SH", {}, "main"),
    ("601318.SH", {}, "main"),
    ("000002.SZ", {}, "main"),
    ("002032.SZ", {}, "main"),
    ("688981.SH", {}, "star"),
    ("300750.SZ", {}, "chinext"),
    ("301001.SZ", {}, "chinext"),
    ("430047.BJ", {}, "bse"),
    ("920118.BJ", {}, "bse"),
    ("SH600000", {}, "main"),
    ("600000", {"exchange": "XSHG"}, "main"),
    ("300001", {"exchange": "XSHE"}, "chinext"),
    ("600000.SH", {"board": "star"}, "star"),  # the metadata wins over the code
])
def test_board_from_code_or_metadata(symbol, meta, board):
    rule = rule_for(symbol, meta)
    assert rule is not None and rule.board == board


@pytest.mark.parametrize("symbol, meta, exchange", [
    ("AAPL", {"exchange": "XNAS"}, None),  # US: no limits
    ("MSFT", {}, None),
    ("EURUSD", {}, None),
    ("000001.SH", {}, None),  # the SSE Composite index, not a stock
    ("399001.SZ", {}, None),  # a Shenzhen index
    ("600000", {}, None),  # a bare code with no exchange anywhere
    ("600000.SH", {"board": "none"}, None),  # marked at import as having none
    ("510300.SH", {}, None),  # a fund
])
def test_no_rule(symbol, meta, exchange):
    assert rule_for(symbol, meta, exchange) is None


def test_request_exchange_used_when_the_metadata_has_none():
    assert rule_for("600000", {}, "XSHG").board == "main"
    assert rule_for("600000", {"exchange": "XNYS"}, "XSHG") is None  # stored one first


def test_special_treatment_and_listing_from_metadata():
    rule = rule_for("600518.SH", {"special_treatment": True, "listed": "2001-03-19"})
    assert rule.special_treatment is True and rule.listed == np.datetime64("2001-03-19")
    assert rule_for("600518.SH", {"special_treatment": "no"}).special_treatment is False
    assert rule_for("600518.SH", {}).special_treatment is None
    with pytest.raises(ValueError, match="special_treatment"):
        rule_for("600518.SH", {"special_treatment": "maybe"})
    with pytest.raises(ValueError, match="board"):
        rule_for("600518.SH", {"board": "gem"})


def test_parse_flag():
    assert parse_flag("Yes", "x") is True and parse_flag("0", "x") is False
    assert parse_flag("", "x") is None and parse_flag(None, "x") is None


def test_bands_by_board_status_and_date():
    d2019, d2021, d2026 = (np.datetime64(x) for x in ("2019-06-24", "2021-06-01", "2026-08-03"))
    assert PriceLimitRule("main").band(d2019) == 0.10
    assert PriceLimitRule("main", True).band(d2019) == 0.05
    assert PriceLimitRule("main", True).band(d2026) == 0.10  # main-board ST from 2026-07-06
    assert PriceLimitRule("star").band(d2021) == 0.20
    assert PriceLimitRule("star", True).band(d2021) == 0.20
    assert PriceLimitRule("chinext").band(d2019) == 0.10
    assert PriceLimitRule("chinext", True).band(d2019) == 0.05
    assert PriceLimitRule("chinext").band(d2021) == 0.20
    assert PriceLimitRule("chinext", True).band(d2021) == 0.20
    assert PriceLimitRule("bse").band(d2026) == 0.30


def test_chinext_steps_across_the_reform_date():
    # history to Friday 2020-08-21, the horizon through the reform on Monday 2020-08-24
    hist = _days("2020-07-01", 20)
    hist = hist[hist <= np.datetime64("2020-08-21")]
    fut = np.array(["2020-08-20", "2020-08-21", "2020-08-24", "2020-08-25"], "datetime64[ns]")
    limits = PriceLimitRule("chinext").step_limits(hist, fut)
    np.testing.assert_array_equal(limits, [0.10, 0.10, 0.20, 0.20])
    text = PriceLimitRule("chinext").describe(limits, fut)
    assert "±10% 2020-08-20..2020-08-21" in text and "±20% 2020-08-24..2020-08-25" in text
    assert "ST status unknown" in text


def test_new_listing_first_days_have_no_limit():
    hist = _days("2021-07-01", 2)  # listed 2021-07-01: two trading days of history
    fut = _days("2021-07-05", 5)
    star = PriceLimitRule("star", listed=np.datetime64("2021-07-01"))
    # the 3rd, 4th and 5th trading days are free, then the board's 20%
    np.testing.assert_array_equal(star.step_limits(hist, fut), [np.inf] * 3 + [0.2] * 2)
    old_main = PriceLimitRule("main", listed=np.datetime64("2021-07-01"))  # before 2023-04-10
    np.testing.assert_array_equal(old_main.step_limits(hist, fut), [0.1] * 5)
    new_main = PriceLimitRule("main", listed=np.datetime64("2023-05-04"))
    np.testing.assert_array_equal(
        new_main.step_limits(_days("2023-05-04", 1), _days("2023-05-05", 6)),
        [np.inf] * 4 + [0.1] * 2,
    )
    bse = PriceLimitRule("bse", listed=np.datetime64("2022-01-04"))
    np.testing.assert_array_equal(bse.step_limits(_days("2022-01-04", 1), _days("2022-01-05", 2)),
                                  [0.3, 0.3])
    # a window that starts after the listing counts the weekdays before it too: Thu 1, Fri 2,
    # Mon 5 July, then the history's Tue 6 is the 4th trading day and Wed 7 the 5th
    late = _days("2021-07-06", 1)
    np.testing.assert_array_equal(star.step_limits(late, _days("2021-07-07", 3)),
                                  [np.inf, 0.2, 0.2])


def test_describe_names_the_rule():
    fut = _days("2019-06-24", 5)
    st = PriceLimitRule("main", True)
    assert st.describe(st.step_limits(fut[:0], fut), fut) == "main board ST ±5%"
    unknown = PriceLimitRule("main")
    assert (unknown.describe(unknown.step_limits(fut[:0], fut), fut)
            == "main board ±10%, ST status unknown")


def _paths_with_moves(last: float, moves: np.ndarray) -> np.ndarray:
    """(1, S, H, 6) paths whose close compounds ``moves`` (S, H) from ``last``; open = the
    previous close, high/low 2% around the close."""
    close = last * np.cumprod(1 + moves, axis=1)  # (S, H)
    prev = np.concatenate([np.full((moves.shape[0], 1), last), close[:, :-1]], axis=1)
    p = np.stack([prev, close * 1.02, close * 0.98, close, np.ones_like(close),
                  np.ones_like(close)], axis=-1)
    return p[None].astype(np.float32)


def _step_moves(paths: np.ndarray, last: float) -> np.ndarray:
    """(S, H, 4) each price of each step relative to the previous step's close, minus 1."""
    close = paths[0, :, :, 3].astype(np.float64)  # (S, H)
    prev = np.concatenate([np.full((close.shape[0], 1), last), close[:, :-1]], axis=1)
    return paths[0, :, :, :4] / prev[..., None] - 1


@pytest.mark.parametrize("limit", [0.05, 0.10, 0.20, 0.30])
def test_paths_never_step_beyond_the_band(limit):
    rng = np.random.default_rng(0)
    moves = rng.normal(0, 0.15, size=(200, 8))  # far wider than any band
    paths = _paths_with_moves(3.0, moves)
    out = limit_paths(paths, np.array([3.0]), np.full((1, 8), limit))
    step = _step_moves(out, 3.0)
    assert np.abs(step).max() <= limit + 1e-6
    assert np.abs(_step_moves(paths, 3.0)).max() > limit  # the raw paths did step beyond it
    # volume and amount untouched; candles stay ordered
    np.testing.assert_array_equal(out[..., 4:], paths[..., 4:])
    assert (out[..., 1] >= out[..., 3]).all() and (out[..., 2] <= out[..., 3]).all()


def test_a_run_of_limit_up_days_compounds():
    paths = _paths_with_moves(2.0, np.full((1, 5), 0.5))  # +50% a day asked
    out = limit_paths(paths, np.array([2.0]), np.full((1, 5), 0.05))
    np.testing.assert_allclose(out[0, 0, :, 3], 2.0 * 1.05 ** np.arange(1, 6), rtol=1e-6)


def test_unlimited_series_and_steps_unchanged():
    rng = np.random.default_rng(1)
    a = _paths_with_moves(10.0, rng.normal(0, 0.2, size=(50, 4)))
    b = _paths_with_moves(10.0, rng.normal(0, 0.2, size=(50, 4)))
    both = np.concatenate([a, b])  # (2, S, H, 6)
    limits = np.array([[np.inf] * 4, [0.1, np.inf, 0.1, 0.1]])
    out = limit_paths(both, np.array([10.0, 10.0]), limits)
    np.testing.assert_array_equal(out[0], both[0])  # no limit: bit for bit
    assert not np.array_equal(out[1], both[1])
    step = _step_moves(out[1:], 10.0)
    assert np.abs(step[:, [0, 2, 3]]).max() <= 0.1 + 1e-6


def test_envelope_and_quantiles():
    lo, hi = limit_envelope(np.array([2.0, 2.0]), np.array([[0.05] * 3, [0.05, np.inf, 0.05]]))
    np.testing.assert_allclose(hi[0], 2.0 * 1.05 ** np.arange(1, 4))
    np.testing.assert_allclose(lo[0], 2.0 * 0.95 ** np.arange(1, 4))
    assert np.isinf(hi[1, 1:]).all() and hi[1, 0] == pytest.approx(2.1)
    q = np.full((2, 2, 3, 6), 100.0, np.float32)  # (Q, B, H, 6)
    out = limit_quantiles(q, np.array([2.0, 2.0]), np.array([[0.05] * 3, [0.05, np.inf, 0.05]]))
    np.testing.assert_allclose(out[:, 0, :, 3], np.broadcast_to(hi[0], (2, 3)), rtol=1e-6)
    assert (out[:, 1, 1:, 3] == 100).all() and (out[..., 4:] == 100).all()


def test_limit_table():
    fut = [_days("2019-06-24", 3), _days("2019-06-24", 3)]
    hist = [_days("2019-06-03", 10)] * 2
    assert limit_table([None, None], hist, fut) is None
    table = limit_table([PriceLimitRule("main", True), None], hist, fut)
    np.testing.assert_array_equal(table, [[0.05] * 3, [np.inf] * 3])


def test_aware_stamps_count_on_their_own_wall_clock():
    """Midnight in Shanghai on Monday 2020-08-24 is Sunday in UTC: still the reform's day."""
    fut = pd.DatetimeIndex(["2020-08-21", "2020-08-24"]).tz_localize("Asia/Shanghai")
    hist = pd.DatetimeIndex(["2020-08-20"]).tz_localize("Asia/Shanghai")
    np.testing.assert_array_equal(PriceLimitRule("chinext").step_limits(hist, fut), [0.1, 0.2])
