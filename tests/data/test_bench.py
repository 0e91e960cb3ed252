"""``kronos bench-store``: both read paths return the same windows; the goal on a full run."""

from __future__ import annotations

import pytest

from kronos_core.cli import main
from kronos_core.data.bench import run_bench


def test_bench_small_run_compares_identical_windows():
    r = run_bench(n_symbols=40, lookback=64, n_candles=200, repeats=3)
    assert r.identical and r.n_symbols == 40
    assert r.store_cold_s > 0 and r.store_warm_s > 0 and r.csv_s > 0
    assert r.store_cold_files_s > 0 and r.store_cold_process_s > 0  # not NaN: it ran
    assert r.snapshot_opens == 40  # the cold read came from the snapshot
    assert r.ratio_warm == pytest.approx(r.csv_s / r.store_warm_s)
    assert r.ratio_cold == pytest.approx(r.csv_s / r.store_cold_s)


def test_cli_bench_store_prints_figures(capsys):
    assert (
        main(
            [
                "bench-store",
                "--symbols",
                "30",
                "--lookback",
                "32",
                "--candles",
                "100",
                "--repeats",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "pandas.read_csv per symbol" in out
        and "faster than CSV" in out
        and "store cold: fresh KlineStore" in out
        and "store cold: new process" in out
        and "same windows every way                : True" in out
        and "goal (<= 50 ms and >= 50x), cold:" in out
        and "goal (<= 50 ms and >= 50x), warm:" in out
    )


@pytest.mark.slow
def test_full_benchmark_workload_reads_identical_windows():
    """The benchmark's own workload (1,000 symbols x 512 candles): every read path returns the
    same windows and the cold read comes from the snapshot. Its speed is reported by
    ``kronos bench-store``, not asserted here (timings on a shared machine are not test facts)."""
    r = run_bench(n_symbols=1000, lookback=512, n_candles=1000, repeats=3)
    assert r.identical and r.snapshot_opens == 1000
    assert r.store_cold_s > 0 and r.store_warm_s > 0 and r.csv_s > 0


def test_append_day_bench_appends_one_row_per_symbol(tmp_path, capsys):
    """``kronos bench store --append-day`` on a small synthetic store: the day's import adds one
    candle to every symbol as one new version, and the figures are printed (their values are
    the benchmark's business, not a test's)."""
    from kronos_core.data.bench_append import load_rows, run_append_bench

    history, days, source = load_rows(12, None)
    assert source == "synthetic" and len(days) == 3
    assert all(d["symbol"].nunique() == len(d) == 12 for d in days)
    assert (days[0]["timestamps"] > history["timestamps"].max()).all()
    r = run_append_bench(12, str(tmp_path), corpus=None)
    assert (r.symbols, r.days, r.version) == (12, 3, 4)  # one version a day
    assert r.rows_after == r.history_rows + 3 * 12
    assert r.append_s > 0 and r.parquet_files_s > 0 and r.ratio == r.append_s / r.parquet_files_s
    code = main(["bench", "store", "--append-day", "--symbols", "12", "--corpus", "none",
                 "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code in (0, 1)  # 1: the ratio missed its goal on this (busy) machine
    assert "kronos import of the day's CSV" in out and "file per symbol" in out
    assert ("goal <= 3x): met" in out) == (code == 0)
    assert list(tmp_path.iterdir()) == []  # the temporary stores are gone


def test_append_day_bench_reads_no_file_it_is_not_given(tmp_path, capsys, monkeypatch):
    """The installed package needs nothing beside the checkout: without ``--corpus`` the
    history is synthetic, and a ``--corpus`` that is not there is an error, not a silent
    fallback."""
    from kronos_core.data import bench_append

    seen = []
    real = bench_append.load_rows
    monkeypatch.setattr(bench_append, "load_rows",
                        lambda n, corpus, *a: seen.append(corpus) or real(n, corpus, *a))
    main(["bench", "store", "--append-day", "--symbols", "4", "--workdir", str(tmp_path)])
    assert seen == [None] and "synthetic" in capsys.readouterr().out
    missing = tmp_path / "nowhere.parquet"
    code = main(["bench", "store", "--append-day", "--corpus", str(missing)])
    assert code == 2 and "no such file" in capsys.readouterr().out
