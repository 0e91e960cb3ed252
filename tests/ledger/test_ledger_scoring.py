"""Scoring the ledger against the store: the figures agree with kronos eval's metric
functions, no look-ahead, each step scored once, inline series, accuracy summaries."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
from ledger_helpers import SHA, append, candles, make_store, record

from kronos_core.eval import metrics as m
from kronos_core.ledger import Ledger, accuracy, by_model_and_step, score, series_hash


def _setup(tmp_path, history=30, horizon=5, symbols=("AAA", "BBB")):
    full = {s: candles(history + horizon + 5, seed=i) for i, s in enumerate(symbols)}
    store = make_store(tmp_path / "store", {s: f.iloc[:history] for s, f in full.items()})
    led = Ledger(tmp_path / "ledger")
    origin = full[symbols[0]].timestamps.iloc[history - 1]
    recs = [
        record(
            s, origin, horizon, request_id="req", seed=10 + i,
            level=float(full[s].close.iloc[history - 1]),
        )
        for i, s in enumerate(symbols)
    ]
    led.record(recs)
    return store, led, full, recs, origin


def test_scores_match_a_direct_computation_with_eval_metrics(tmp_path):
    store, led, full, recs, _ = _setup(tmp_path)
    for s, f in full.items():
        append(store, s, f.iloc[30:35])
    res = score(led, store)
    assert res.scores.num_rows == 10 and res.waiting == 0 and res.per_model() == {SHA: 10}
    got = res.scores.to_pandas().sort_values(["symbol", "horizon_step"])
    for rec in recs:
        truth = full[rec.symbol].close.iloc[30:35].to_numpy()[None, :]  # (1, H)
        # the origin's close, read from the store
        last = np.array([full[rec.symbol].close.iloc[29]])
        mean = np.asarray(rec.mean["close"])[None, :]
        q = {lv: np.asarray(v["close"])[None, :] for lv, v in rec.quantiles.items()}
        crps = (
            2 * np.mean([m.pinball_elements(q[lv], truth, lv) for lv in (0.1, 0.5, 0.9)], axis=0)[0]
        )
        cov = m.covered(q[0.1], q[0.9], truth)[0]
        ae = m.abs_errors(mean, truth)[0]
        hits = [m.direction_hits(mean[:, : h + 1], truth[:, : h + 1], last)[0] for h in range(5)]
        mine = got[got.symbol == rec.symbol]
        np.testing.assert_allclose(mine.crps, crps, rtol=1e-12)
        np.testing.assert_allclose(mine["covered_0.8"], cov)
        np.testing.assert_allclose(mine.abs_error, ae, rtol=1e-12)
        np.testing.assert_allclose(mine.direction_hit, hits)
        np.testing.assert_allclose(mine.truth_close, truth[0])
        np.testing.assert_allclose(mine.last_close, last[0])
    summary = accuracy(res.scores)
    assert summary["all_time"]["scored"] == 10
    allcov = np.concatenate(
        [
            m.covered(
                np.asarray(r.quantiles[0.1]["close"])[None],
                np.asarray(r.quantiles[0.9]["close"])[None],
                full[r.symbol].close.iloc[30:35].to_numpy()[None],
            )[0]
            for r in recs
        ]
    )
    assert summary["all_time"]["coverage"]["0.8"] == pytest.approx(allcov.mean())
    assert summary["all_time"]["mae"] == pytest.approx(got.abs_error.mean())
    assert summary["all_time"]["crps"] == pytest.approx(got.crps.mean())


def test_no_look_ahead_a_truth_scores_only_the_steps_it_closes(tmp_path):
    store, led, full, recs, origin = _setup(tmp_path, symbols=("AAA",))
    assert score(led, store).scores.num_rows == 0  # nothing after the origin yet
    f = full["AAA"]
    append(store, "AAA", f.iloc[30:31])  # the first forecast day's candle
    first = score(led, store)
    assert first.scores["horizon_step"].to_pylist() == [1] and first.waiting == 4
    assert first.scores["truth_close"].to_pylist() == [pytest.approx(f.close.iloc[30])]
    # a later candle (day 3) arrives before day 2: it scores step 3 only, from its own candle
    append(store, "AAA", f.iloc[32:33])
    later = score(led, store)
    assert later.scores["horizon_step"].to_pylist() == [3]
    assert later.scores["truth_close"].to_pylist() == [pytest.approx(f.close.iloc[32])]
    append(store, "AAA", f.iloc[31:32])
    assert score(led, store).scores["horizon_step"].to_pylist() == [2]
    # the first step's score never changed: still the one scored from day 1's candle alone
    steps = led.read_scores().to_pandas().sort_values("horizon_step")
    assert list(steps.horizon_step) == [1, 2, 3]
    np.testing.assert_allclose(steps.truth_close, f.close.iloc[30:33])


def test_a_forecast_made_as_of_the_past_is_scored_at_once(tmp_path):
    f = candles(40)
    store = make_store(tmp_path / "store", {"AAA": f})
    led = Ledger(tmp_path / "ledger")
    led.record([record("AAA", f.timestamps.iloc[19], 5)])  # as_of day 20: its truths are stored
    res = score(led, store)
    assert res.scores.num_rows == 5
    np.testing.assert_allclose(
        sorted(res.scores["truth_close"].to_pylist()), sorted(f.close.iloc[20:25])
    )


def test_each_step_is_scored_once(tmp_path):
    store, led, full, _, _ = _setup(tmp_path)
    for s, f in full.items():
        append(store, s, f.iloc[30:33])
    assert score(led, store).scores.num_rows == 6
    assert score(led, store).scores.num_rows == 0  # nothing new
    # a re-import with other values does not rescore
    changed = full["AAA"].iloc[30:33].copy()
    changed[["open", "high", "low", "close"]] *= 1.5
    store.write("AAA", changed, frequency="1d", on_overlap="replace")
    store.clear_cache()
    assert score(led, store).scores.num_rows == 0
    for s, f in full.items():
        append(store, s, f.iloc[33:35])
    assert score(led, store).scores.num_rows == 4
    keys = led.read_scores().to_pandas()[["request_id", "symbol", "horizon_step"]]
    assert len(keys) == 10 and not keys.duplicated().any()


def test_recorded_origin_close_is_used_for_direction(tmp_path):
    f = candles(40)
    store = make_store(tmp_path / "store", {"AAA": f})
    led = Ledger(tmp_path / "ledger")
    rec = record("AAA", f.timestamps.iloc[19], 2, last_close=1e9)  # every truth is below it
    rec.mean = {"close": [2e9, 2e9]}  # the mean above: direction wrong
    led.record([rec])
    assert score(led, store).scores["direction_hit"].to_pylist() == [0.0, 0.0]


def test_inline_series_is_scored_once_its_symbol_arrives_by_import(tmp_path):
    f = candles(30)
    store = make_store(tmp_path / "store", {"AAA": f})
    led = Ledger(tmp_path / "ledger")
    h = series_hash(
        f.timestamps[:20], f[["open", "high", "low", "close", "volume", "amount"]].to_numpy()[:20]
    )
    led.record([record("NEW", f.timestamps.iloc[19], 3, source="inline", series_hash=h)])
    first = score(led, store)
    assert first.scores.num_rows == 0 and first.waiting == 3  # NEW is not in the store
    append(store, "NEW", f.iloc[:22])
    res = score(led, store)
    assert res.scores["horizon_step"].to_pylist() == [1, 2]
    assert set(res.scores["source"].to_pylist()) == {"inline"}


def test_scores_survive_a_corrupt_ledger_file(tmp_path):
    store, led, full, _, origin = _setup(tmp_path, symbols=("AAA",))
    bad = led.record([record("AAA", origin, 5, request_id="other")])
    assert bad is not None
    bad.write_bytes(b"garbage")
    append(store, "AAA", full["AAA"].iloc[30:35])
    res = score(led, store)
    assert res.scores.num_rows == 5 and [p for p, _ in res.skipped_files] == [bad]


def test_accuracy_filters_and_rolling_window(tmp_path):
    store, led, full, _, origin = _setup(tmp_path, symbols=("AAA", "BBB"))
    for s, f in full.items():
        append(store, s, f.iloc[30:35])
    score(led, store)
    scores = led.read_scores()
    assert accuracy(led)["all_time"]["scored"] == 10
    assert accuracy(scores, symbol="AAA")["all_time"]["scored"] == 5
    assert accuracy(scores, horizon_step=2)["all_time"]["scored"] == 2
    assert accuracy(scores, model="nope")["all_time"]["scored"] == 0
    assert accuracy(scores, model="nope")["all_time"]["crps"] is None
    roll = accuracy(scores, window=4)
    assert roll["rolling"]["scored"] == 4 and roll["window"] == {"steps": 4}
    df = scores.to_pandas().sort_values(["step_time", "request_time", "request_id", "symbol"])
    assert roll["rolling"]["mae"] == pytest.approx(df.abs_error.iloc[-4:].mean())
    by_time = accuracy(scores, window=timedelta(days=1))
    assert by_time["rolling"]["scored"] == 4  # the last two days, two symbols
    rows = by_model_and_step(scores, 500)
    assert [r["horizon_step"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(r["all_time"]["scored"] == 2 for r in rows)
    with pytest.raises(ValueError):
        accuracy(scores, window=0)
    assert (
        accuracy(scores, since=pd.Timestamp.now(tz="UTC") + pd.Timedelta(days=1))["all_time"][
            "scored"
        ]
        == 0
    )


def test_completely_scored_files_are_not_read_again(tmp_path, monkeypatch):
    store, led, full, _, origin = _setup(tmp_path, symbols=("AAA",))
    led.record([record("AAA", origin, 2, request_id="short")])
    append(store, "AAA", full["AAA"].iloc[30:32])
    assert score(led, store).scores.num_rows == 4  # the short one whole, the long one's first 2
    complete = led.complete_files()
    assert len(complete) == 1 and len(led.files()) == 2
    read = []
    import kronos_core.ledger.scoring as scoring

    real = scoring.read_files

    def spy(files, *a, **k):
        read.append(list(files))
        return real(files, *a, **k)

    monkeypatch.setattr(scoring, "read_files", spy)
    append(store, "AAA", full["AAA"].iloc[32:35])
    assert score(led, store).scores.num_rows == 3
    assert len(read[0]) == 1 and f"{read[0][0].parent.name}/{read[0][0].name}" not in complete
    assert len(led.complete_files()) == 2
    keys = led.read_scores().to_pandas()[["request_id", "symbol", "horizon_step"]]
    assert len(keys) == 7 and not keys.duplicated().any()


def test_concurrent_scorers_score_each_step_once(tmp_path):
    import threading

    store, led, full, _, _ = _setup(tmp_path, symbols=("AAA", "BBB", "CCC"))
    for s, f in full.items():
        append(store, s, f.iloc[30:35])
    counts: list[int] = []

    def run():
        from kronos_core.data.store_reader import KlineReader

        mine = Ledger(led.root, writer_id=f"w{threading.get_ident() % 1000}")
        counts.append(score(mine, KlineReader(store.root, "1d")).scores.num_rows)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts) == [0, 0, 0, 15]
    keys = led.read_scores().to_pandas()[["request_id", "symbol", "horizon_step"]]
    assert len(keys) == 15 and not keys.duplicated().any()


def test_require_next_bar_waits_for_a_later_candle(tmp_path):
    store, led, full, _, _ = _setup(tmp_path, symbols=("AAA",))
    # steps 1 and 2; step 2's bar may still be forming
    append(store, "AAA", full["AAA"].iloc[30:32])
    first = score(led, store, require_next_bar=True)
    assert first.scores["horizon_step"].to_pylist() == [1]
    append(store, "AAA", full["AAA"].iloc[32:33])
    assert score(led, store, require_next_bar=True).scores["horizon_step"].to_pylist() == [2]


def _spy_reads(monkeypatch) -> list[list]:
    import kronos_core.ledger.scoring as scoring

    read: list[list] = []
    real = scoring.read_files

    def spy(files, *a, **k):
        files = list(files)
        if "columns" not in k:  # the forecast files (the scores' keys are read with columns=KEY)
            read.append(files)
        return real(files, *a, **k)

    monkeypatch.setattr(scoring, "read_files", spy)
    return read


def test_files_waiting_for_truth_are_not_read_again_until_the_store_reaches_them(
    tmp_path, monkeypatch
):
    from kronos_core.ledger.scoring import WaitingFiles

    store, led, full, _, origin = _setup(tmp_path)  # AAA and BBB, 5 steps each, none due yet
    read = _spy_reads(monkeypatch)
    memo = WaitingFiles()
    first = score(led, store, waiting=memo)
    assert first.scores.num_rows == 0 and first.waiting == 10 and len(read) == 1
    (key,) = memo.waits
    assert set(memo.waits[key]) == {("AAA", "1d"), ("BBB", "1d")}
    # nothing due: not read
    assert score(led, store, waiting=memo).waiting == 0 and len(read) == 2 and read[1] == []
    # a new file is read (alone); the old one still waits
    led.record([record("AAA", origin, 2, request_id="new")])
    assert score(led, store, waiting=memo).waiting == 2 and [len(r) for r in read] == [1, 0, 1]
    # BBB's store reaches its first step: the old file is read again, and scored like a pass without
    # memory
    append(store, "BBB", full["BBB"].iloc[30:32])
    res = score(led, store, waiting=memo)
    assert len(read[-1]) == 1 and res.scores.num_rows == 2
    assert set(res.scores["symbol"].to_pylist()) == {"BBB"}
    append(store, "AAA", full["AAA"].iloc[30:35])
    append(store, "BBB", full["BBB"].iloc[32:35])
    # BBB's rest, AAA's two requests
    assert score(led, store, waiting=memo).scores.num_rows == 3 + 5 + 2
    assert memo.waits == {} and len(led.complete_files()) == 2
    keys = led.read_scores().to_pandas()[["request_id", "symbol", "horizon_step"]]
    assert len(keys) == 12 and not keys.duplicated().any()


def test_a_new_process_resumes_from_the_saved_index_and_reads_no_file_not_due(
    tmp_path, monkeypatch
):
    """The first pass after a start: the memory saved by the last pass (a small JSON index), so the
    files still waiting are not read again; a missing or corrupt index costs one full read."""
    from kronos_core.ledger.scoring import WaitingFiles

    store, led, full, _, origin = _setup(tmp_path)  # AAA and BBB, 5 steps each, none due yet
    read = _spy_reads(monkeypatch)
    memo = WaitingFiles()
    score(led, store, waiting=memo)
    index = tmp_path / "scoring-index.json"
    memo.save(index)
    assert index.stat().st_size < 1000
    resumed = WaitingFiles.load(index)  # a new process
    assert resumed.waits == memo.waits
    # nothing due: not read
    assert score(led, store, waiting=resumed).waiting == 0 and read[-1] == []
    append(store, "AAA", full["AAA"].iloc[30:32])  # now due: read, and scored as without the index
    assert score(led, store, waiting=resumed).scores.num_rows == 2 and len(read[-1]) == 1
    index.write_text("{not json")
    assert WaitingFiles.load(index).waits == {}  # unusable: every waiting file is read once more
    assert WaitingFiles.load(tmp_path / "absent.json").waits == {}


def test_a_symbol_the_store_cannot_tell_the_last_candle_of_is_read_every_pass(
    tmp_path, monkeypatch
):
    from kronos_core.ledger.scoring import WaitingFiles

    store, led, _, _, origin = _setup(tmp_path, symbols=("AAA",))
    led.record([record("GONE", origin, 3, request_id="inline")])  # no such symbol in the store
    read = _spy_reads(monkeypatch)
    memo = WaitingFiles()
    score(led, store, waiting=memo)
    score(led, store, waiting=memo)
    assert [len(r) for r in read] == [2, 1]  # the file with the unknown symbol again; AAA's not


@pytest.mark.parametrize("since", [None, "request day"])
def test_scores_in_an_earlier_partition_are_not_scored_again_after_a_restart(tmp_path, since):
    """Issue 42, finding 11: de-duplication must read every partition the request's scores can
    be in, not only today's: scores written on an earlier day (moved to yesterday's partition
    here) are not written again by a scorer that starts afresh."""
    store, led, full, _, _ = _setup(tmp_path)
    for s, f in full.items():
        append(store, s, f.iloc[30:33])
    assert score(led, store).scores.num_rows == 6
    (today,) = [p for p in led.scores_root.iterdir() if p.name.startswith("date=")]
    day = pd.Timestamp(today.name.split("=", 1)[1])
    earlier = today.with_name(f"date={(day - pd.Timedelta(days=1)).date()}")
    today.rename(earlier)  # scored yesterday
    for s, f in full.items():
        append(store, s, f.iloc[33:35])
    fresh = Ledger(tmp_path / "ledger")  # a restarted scorer: nothing in memory
    when = None if since is None else led.read().to_pandas()["request_time"].min().floor("D")
    assert score(fresh, store, since=when).scores.num_rows == 4
    keys = fresh.read_scores().to_pandas()[["request_id", "symbol", "horizon_step"]]
    assert len(keys) == 10 and not keys.duplicated().any()
