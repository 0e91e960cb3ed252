"""``kronos bench portfolio``: its figures and its goals (the engine part, without Ray). The
times are stood in for, so that the verdicts do not depend on this machine's speed."""

from __future__ import annotations

import argparse
import json

import pytest

from kronos_core.cli.bench import synthetic_series
from kronos_core.data import portfolio_windows
from kronos_core.data.portfolio_windows import PortfolioWindows
from loadtests import bench_portfolio
from tests.fixture_paths import TINY


def _args(tmp_path, **over) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_portfolio.add_arguments(parser)
    args = parser.parse_args(["--symbols", "3", "--horizon", "4", "--series-per-call", "2",
                              "--json", str(tmp_path / "out.json")])
    return argparse.Namespace(**{**vars(args), **over})


@pytest.fixture
def tiny_workload(monkeypatch):
    """The tiny checkpoint in place of the bundled model, random-walk windows in place of the
    sample store, and a matrix speed of exactly 1 GFLOP/s."""
    import kronos_core.loading as loading

    real_load = loading.load_predictor
    monkeypatch.setattr(
        loading, "load_predictor",
        lambda cfg=None: real_load(loading.PredictorConfig(model=TINY, device="cpu")),
    )

    def windows(n, lookback, horizon):
        values, xs, ys = synthetic_series(n, lookback, horizon, seed=0)
        return PortfolioWindows([f"S{i}" for i in range(n)], values, xs, ys)

    monkeypatch.setattr(portfolio_windows, "sample_store_windows", windows)
    monkeypatch.setattr(bench_portfolio, "matmul_rate", lambda rows, inner, out: 1e9)


def test_it_prints_the_engine_the_matrix_speed_the_arithmetic_and_the_ratio(
    tiny_workload, tmp_path, capsys, monkeypatch
):
    calls = []
    real_engine = bench_portfolio.engine_side

    def engine(args, predictor, windows, options):
        real = real_engine(args, predictor, windows, options)  # the engine does run every window
        calls.append((len(windows), len(real)))
        return [(3e-9, 2e-9), (1e-9, 1e-9), (2e-9, 3e-9)]  # far inside any limit

    def no_service(*args):
        raise AssertionError("the service part ran without --service")

    monkeypatch.setattr(bench_portfolio, "engine_side", engine)
    monkeypatch.setattr(bench_portfolio, "service_side", no_service)
    assert bench_portfolio.run(_args(tmp_path)) == 0
    out = capsys.readouterr().out
    figures = json.loads((tmp_path / "out.json").read_text())
    assert calls == [(3, 3)] and figures["symbols"] == 3 and figures["horizon"] == 4
    # the fastest of the three passes is the figure; every pass is kept
    assert figures["passes"] == 3 and figures["engine_s"] == 1e-9
    assert figures["engine_passes_s"] == [3e-9, 1e-9, 2e-9]
    assert figures["engine_median_over_limit"] == pytest.approx(2e-9 / figures["limit_s"])
    assert figures["limit_rate_flops_per_s"] == 1e9
    assert figures["limit_s"] == pytest.approx(figures["flops"] / 1e9)
    assert figures["engine_over_limit"] == pytest.approx(1e-9 / figures["limit_s"])
    assert figures["engine_cpu_over_limit"] == pytest.approx(
        1e-9 / figures["threads"] / figures["limit_s"]
    )
    assert figures["missed"] == [] and "goals met" in out
    for part in ("matrix speed", "arithmetic:", "engine / limit", "GFLOP/s"):
        assert part in out
    assert "service_s" not in figures


def test_an_engine_past_its_goal_exits_1_saying_so(tiny_workload, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench_portfolio, "engine_side", lambda *a: [(1e6, 1e6)])
    assert bench_portfolio.run(_args(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "GOAL MISSED: engine / limit" in out and "> 2.5" in out
    assert json.loads((tmp_path / "out.json").read_text())["missed"]


def test_the_service_part_is_asked_only_with_service(tmp_path, monkeypatch):
    """Without ``--service`` the command needs nothing of the serve extra."""
    assert bench_portfolio.requires(_args(tmp_path)) == []


def test_passes_must_be_at_least_one():
    parser = argparse.ArgumentParser()
    bench_portfolio.add_arguments(parser)
    assert parser.parse_args(["--passes", "1"]).passes == 1
    assert parser.parse_args([]).passes == bench_portfolio.DEFAULT_PASSES == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--passes", "0"])


def test_the_service_figure_is_its_fastest_pass_and_a_short_answer_is_a_miss(
    tiny_workload, tmp_path, capsys, monkeypatch
):
    """``--service``: each pass's time kept, the fastest against the engine's fastest, and a pass
    that answered fewer forecasts than asked is a miss even when another answered all."""
    monkeypatch.setattr(bench_portfolio, "engine_side", lambda *a: [(2.0, 2.0), (1.0, 1.0)])
    monkeypatch.setattr(bench_portfolio, "matmul_rate", lambda rows, inner, out: 1.0)  # no limit
    monkeypatch.setattr(bench_portfolio, "service_side", lambda *a: [(1.5, 3), (1.1, 3)])
    assert bench_portfolio.run(_args(tmp_path, service=True, passes=2)) == 0
    figures = json.loads((tmp_path / "out.json").read_text())
    assert figures["service_passes_s"] == [1.5, 1.1] and figures["engine_s"] == 1.0
    assert figures["service_s"] == 1.1 and figures["service_over_engine"] == pytest.approx(1.1)
    assert figures["missed"] == [] and figures["forecasts_answered"] == 3
    monkeypatch.setattr(bench_portfolio, "service_side", lambda *a: [(1.1, 3), (1.0, 2)])
    assert bench_portfolio.run(_args(tmp_path, service=True, passes=2)) == 1
    figures = json.loads((tmp_path / "out.json").read_text())
    assert "the service answered 2 of 3 forecasts" in figures["missed"]
    assert "service passes: 1.10, 1.00 s (median 1.05 s)" in capsys.readouterr().out
