"""Training from a corpus never reads a hold-out instrument, nor a row whose bar lies inside an
evaluation period of its underlying at any bar size: on a synthetic corpus whose closes name
their rows (always runs), and on ``../shared/data/corpus`` when it is there."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from fixture_paths import SHARED_CORPUS, shared_path
from train_helpers import tiny_overrides

from kronos_core.train.data import corpus_series
from tests.train.corpus_helpers import (
    allowed_by_the_rules,
    read_table,
    row_of,
    write_synthetic_corpus,
)


def _data_config(root, window: int = 12, **extra):
    """What ``corpus_series`` reads of a DataConfig."""
    return SimpleNamespace(corpus=str(root), markets=None, frequencies=None, window=window, **extra)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def rows_read(corpus) -> dict[str, set[int]]:
    """symbol -> the rows (of its file) that training series hold, decoded from their closes."""
    out: dict[str, set[int]] = {}
    for s in corpus_series(_data_config(corpus)):
        for k, close in enumerate(s.values[:, 3]):
            symbol, row, stamp = row_of(close)
            assert s.name.startswith(f"{symbol}[")  # the rows of the instrument it names
            assert s.timestamps is not None
            assert s.timestamps[k] == stamp  # and at their own times
            out.setdefault(symbol, set()).add(row)
    return out


def _stamps(corpus, symbol: str) -> pd.DatetimeIndex:
    frame = pd.concat(pd.read_parquet(p, filters=[("symbol", "==", symbol)])
                      for p in corpus.glob("*.parquet"))
    return pd.DatetimeIndex(frame["timestamps"])


def test_every_row_read_is_one_the_rules_allow(corpus, rows_read):
    table = read_table(corpus)
    # both hold-out series absent
    assert set(rows_read) == {"AAA", "AAA@1h", "BBB", "BBB@1h", "CCC"}
    for symbol, rows in rows_read.items():
        stamps = _stamps(corpus, symbol)
        allowed = allowed_by_the_rules(table, symbol, stamps)
        bad = sorted(r for r in rows if not allowed[r])
        assert not bad, f"{symbol}: rows {bad[:5]} ({stamps[bad[:5]].tolist()}) held out"
        assert len(rows) >= 0.5 * allowed.sum()  # and it does read most of what it may


def test_an_hourly_evaluation_period_removes_those_days_from_daily_training(corpus, rows_read):
    table = read_table(corpus).set_index("symbol")
    first, last = table.loc["BBB@1h", "eval_from"], table.loc["BBB@1h", "last"]
    assert first.hour == 13  # it starts in the middle of a day: the day's daily bar overlaps it
    daily = _stamps(corpus, "BBB")
    inside = np.flatnonzero((daily >= first.normalize()) & (daily <= last))
    assert len(inside) == 9 and daily[inside[0]] == first.normalize()
    assert not rows_read["BBB"] & set(inside.tolist())
    assert {inside[0] - 1, inside[-1] + 1} <= rows_read["BBB"]  # the days either side stay in


def test_a_daily_evaluation_period_removes_its_hours_down_to_the_last_day(corpus, rows_read):
    table = read_table(corpus).set_index("symbol")
    first, last = table.loc["AAA", "eval_from"], table.loc["AAA", "last"]
    hourly = _stamps(corpus, "AAA@1h")
    inside = np.flatnonzero((hourly >= first) & (hourly < last + pd.Timedelta(days=1)))
    on_last_day = np.flatnonzero(hourly.normalize() == last)
    assert len(on_last_day) == 7 and set(on_last_day) <= set(inside)  # labelled after "last" 00:00
    assert not rows_read["AAA@1h"] & set(inside.tolist())
    assert inside[0] - 1 in rows_read["AAA@1h"]  # the hours before it are training rows
    assert on_last_day[-1] + 1 in rows_read["AAA@1h"]  # and so is the next day's first hour


def test_the_trainer_windows_hold_only_allowed_rows(corpus, tmp_path):
    """The Trainer (what ``kronos train --corpus`` builds): every row of every training and
    validation window is an allowed row."""
    from kronos_core.train.config import load_config
    from kronos_core.train.trainer import Trainer

    data = {"data.paths": [], "data.corpus": str(corpus), "data.lookback": 8, "data.horizon": 4,
            "data.stride": 4}
    overrides = tiny_overrides(tmp_path / "run", **data)
    trainer = Trainer(load_config(None, overrides))
    table = read_table(corpus)
    allowed = {s: allowed_by_the_rules(table, s, _stamps(corpus, s)) for s in table["symbol"]}
    checked = 0
    for dataset in (trainer.train_set, trainer.val_set):
        for sid, start in dataset.index:
            for close in dataset.series[sid].values[start:start + dataset.cfg.window, 3]:
                symbol, row, _ = row_of(close)
                assert allowed[symbol][row], (symbol, row)
                checked += 1
    assert checked > 1000 and len(trainer.val_set) > 0


# ---- each hold-out layer on its own -----------------------------------------------------------
# Training keeps a hold-out instrument out twice: ``corpus_series`` loads only ``split == train``
# instruments (the split filter), and ``Corpus.training_mask`` allows no row of a
# ``holdout_instrument`` (the mask, which also carries the time rules). The tests above see both
# at once; the two below switch one layer off or leave it out, so a fault in either one fails.
HELD_OUT = {"HHH", "HHH@1h"}


def test_the_split_filter_alone_keeps_the_hold_out_instruments_out(corpus, monkeypatch):
    """With the mask switched off (every row allowed), ``corpus_series`` still reads no row of a
    hold-out instrument: the ``split == train`` filter alone keeps them out. Planted fault it
    catches: ``CorpusFilter(split=TRAIN,`` -> ``CorpusFilter(split=None,`` in
    ``kronos_core.train.data.corpus_series``."""
    from kronos_core.data.corpus import TRAIN, Corpus, CorpusFilter

    assert set(Corpus(corpus).select(CorpusFilter(split=TRAIN))["symbol"]) == {
        "AAA", "AAA@1h", "BBB", "BBB@1h", "CCC"}
    monkeypatch.setattr(Corpus, "training_mask",
                        lambda self, symbol, timestamps: np.ones(len(timestamps), dtype=bool))
    read: dict[str, set[int]] = {}
    for s in corpus_series(_data_config(corpus)):
        for close in s.values[:, 3]:
            symbol, row, _ = row_of(close)
            read.setdefault(symbol, set()).add(row)
    assert not HELD_OUT & set(read), sorted(HELD_OUT & set(read))
    # the mask is really off: the train instruments' evaluation rows come in now
    table = read_table(corpus)
    aaa = allowed_by_the_rules(table, "AAA", _stamps(corpus, "AAA"))
    assert read["AAA"] == set(range(len(aaa))) and not aaa.all()


def test_the_mask_alone_keeps_out_hold_out_instruments_and_evaluation_rows(corpus):
    """With no split filter (every instrument loaded), ``Corpus.training_mask`` alone gives
    exactly the rows the rules allow, row by row, and ``training_segments`` holds no other:
    nothing of a hold-out instrument, no row at or after its own ``eval_from``, no bar inside
    another bar size's evaluation period. Planted fault it catches (the suite missed it before):
    ``if info["split"] == HOLDOUT_INSTRUMENT:`` -> ``if False:`` in ``training_mask``; it also
    fails on ``timestamps < eval_from`` -> ``<=`` and on the cross-bar-size loop skipped."""
    from kronos_core.data.corpus import Corpus, CorpusFilter, training_segments

    c = Corpus(corpus)
    series = c.load(CorpusFilter())  # no split filter: the hold-out instruments are loaded
    assert HELD_OUT <= {s.symbol for s in series}
    table = read_table(corpus)
    for s in series:
        expected = allowed_by_the_rules(table, s.symbol, s.timestamps)
        got = c.training_mask(s.symbol, s.timestamps)
        np.testing.assert_array_equal(got, expected, err_msg=s.symbol)
    segments = training_segments(c, series, min_rows=1)
    assert not HELD_OUT & {s.symbol for s, _, _ in segments}
    info = table.set_index("symbol")
    for s, start, end in segments:
        stamps = s.timestamps[start:end]
        assert (stamps < info.loc[s.symbol, "eval_from"]).all(), s.symbol
        assert allowed_by_the_rules(table, s.symbol, stamps).all(), s.symbol
    # the rules bite where the synthetic corpus was built for them: each of the three
    by_symbol = {s.symbol: s for s in series}
    aaa = by_symbol["AAA"].timestamps
    first_eval = int(np.flatnonzero(aaa == info.loc["AAA", "eval_from"])[0])
    assert c.training_mask("AAA", aaa)[first_eval - 1] and not c.training_mask("AAA", aaa)[
        first_eval]  # the own eval_from row is the first one out
    bbb = by_symbol["BBB"].timestamps  # its hourly sibling's evaluation days
    assert (bbb < info.loc["BBB", "eval_from"])[
        ~c.training_mask("BBB", bbb)].sum() == 9
    hhh_hourly = by_symbol["HHH@1h"].timestamps
    assert (hhh_hourly < info.loc["HHH@1h", "eval_from"]).any()  # time alone would keep some


def test_market_and_frequency_filters_apply(corpus):
    names = {s.name.split("[")[0] for s in corpus_series(SimpleNamespace(
        corpus=str(corpus), markets=["US"], frequencies=["1h"], window=12))}
    assert names == {"AAA@1h"}


def test_the_real_corpus_training_rows_obey_both_rules():
    """Every training segment of ../shared/data/corpus, row by row, against the rules (skips
    when the shared folder is absent)."""
    corpus = shared_path(f"{SHARED_CORPUS}/instruments.csv").parent
    started = time.perf_counter()
    table = read_table(corpus)
    series = corpus_series(_data_config(corpus, window=64))
    held_out = set(table.loc[table["split"] != "train", "symbol"])
    by_symbol: dict[str, list] = {}
    for s in series:
        by_symbol.setdefault(s.name.rsplit("[", 1)[0], []).append(s)
    assert not held_out & set(by_symbol) and len(by_symbol) > 400
    rows = 0
    for symbol, parts in by_symbol.items():
        for s in parts:
            assert s.timestamps is not None
            ok = allowed_by_the_rules(table, symbol, s.timestamps)
            assert ok.all(), f"{s.name}: {s.timestamps[~ok][:3].tolist()} are held out"
            rows += len(s.timestamps)
    # the cross-bar-size rule did bite: AIG@1h loses the hours of AIG's last daily evaluation day
    aig = table.set_index("symbol").loc["AIG", "last"]
    hours = pd.DatetimeIndex(np.concatenate([s.timestamps.asi8 for s in by_symbol["AIG@1h"]]))
    assert not (hours.normalize() == aig).any() and (hours < aig).any()
    print(f"real corpus: {rows} training rows in {len(series)} segments of {len(by_symbol)} "
          f"instruments checked in {time.perf_counter() - started:.0f} s")
