"""A simulated trading week with the real service: history imported with the store writer,
a portfolio (GOOG, SPX: real daily candles from kronos_core/data/real/) forecast every "day"
``as_of`` that day, each day's real candles appended, the background scorer left to run.
The ledger rows, the scores, ``/v1/accuracy``, the gauges and the adaptive (ACI) state move as
they should, checked against a direct computation with kronos_core.eval's metric functions
on the same forecasts and truths (and an offline replay of the ACI walk).

The service under test is a second Serve app in the integration session's Ray instance (its
own store, ledger and a 1 s scoring interval, one predictor replica, one gateway), mounted
at ``/ledgerweek`` of the same HTTP proxy, and deleted at the end. Cost: about 60-120 s on
2 CPU cores (a second model load, six small forecasts, a scoring pass per day).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

REAL = Path(__import__("kronos_core.data", fromlist=["x"]).__file__).parent / "real"
SYMBOLS = {"GOOG": "goog_daily.csv", "SPX": "sp500_daily.csv"}
CUT = pd.Timestamp("2006-03-22")  # the history ends here; the week is the next five sessions
HORIZON = 3
APP = "ledgerweek"


def real_frame(file: str) -> pd.DataFrame:
    df = pd.read_csv(REAL / file, parse_dates=["timestamps"])
    df["amount"] = df["volume"] * (df["open"] + df["high"] + df["low"] + df["close"]) / 4
    return df


def aci_calibration(path: Path, model: dict):
    """An ACI calibration fitted for the served model (level 0.8, horizon 3), starting with no
    correction, so whatever the week does moves it."""
    from kronos_core.calibration import aci
    from kronos_core.calibration.conformal import Calibration

    feats = ("open", "high", "low", "close")
    state = aci.initial_state(np.zeros((30, 1, HORIZON, len(feats))), (0.8,), gamma=0.05)
    Calibration(
        "aci", {"name": model["name"], "sha256": model["sha256"]}, (0.8,), feats,
        state.correction(), {}, state,
    ).save(path)
    return Calibration.load(path)


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if (last is not None) if isinstance(last, pd.DataFrame) else bool(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached in {timeout} s (last: {last})")


def metric(client: httpx.Client, name: str, labels: dict) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    text = client.get("/metrics").text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def direct_scores(
    rows: pd.DataFrame, frames: dict[str, pd.DataFrame], known_until: pd.Timestamp
) -> pd.DataFrame:
    """The ledger's forecast rows whose truth is known (a real candle at exactly the step's
    time, no later than ``known_until``), with their scores from kronos_core.eval.metrics."""
    from kronos_core.eval import metrics as em

    out = []
    for _, r in rows.iterrows():
        f = frames[r["symbol"]]
        hit = f[f["timestamps"] == r["step_time"]]
        if hit.empty or r["step_time"] > known_until:
            continue
        y = np.array([[float(hit["close"].iloc[0])]])
        mean = np.array([[r["mean_close"]]])
        lo, mid, hi = (np.array([[r[f"close_q{q}"]]]) for q in ("0.1", "0.5", "0.9"))
        pins = [em.pinball_elements(v, y, lv)[0, 0] for lv, v in ((0.1, lo), (0.5, mid), (0.9, hi))]
        out.append(
            {
                **r.to_dict(), "truth_close": float(y[0, 0]),
                "covered": float(em.covered(lo, hi, y)[0, 0]), "crps": 2 * float(np.mean(pins)),
                "abs_error": float(em.abs_errors(mean, y)[0, 0]),
            }
        )
    return pd.DataFrame(out)


@pytest.fixture(scope="module")
def week_service(live_service, tmp_path_factory):
    from ray import serve

    from kronos_core.data.store import KlineStore
    from service.app import build_app

    root = tmp_path_factory.mktemp("ledger-week")
    frames = {s: real_frame(f) for s, f in SYMBOLS.items()}
    store = KlineStore(root / "store")
    for sym, df in frames.items():
        store.write(sym, df[df["timestamps"] <= CUT], frequency="1d", timezone="America/New_York",
                    extra_metadata={"exchange": "XNYS"})
    model = live_service.client.get("/v1/models").json()["models"][0]
    cal_path = root / "aci.json"
    aci_calibration(cal_path, model)
    settings = live_service.settings.model_copy(
        update=dict(
            app_name=APP, store_dir=str(root / "store"), ledger_dir=str(root / "ledger"),
            score_interval_s=1.0, calibration=str(cal_path), num_replicas=1, replica_cpus=1,
            gateway_replicas=1, metrics_dir=str(root / "metrics"),
        )
    )
    serve.run(build_app(settings), name=APP, route_prefix=f"/{APP}", blocking=False)
    client = httpx.Client(base_url=f"{live_service.url}/{APP}", timeout=300)
    try:
        wait_for(lambda: client.get("/readyz").status_code == 200, 300, "the week service ready")
        yield {
            "client": client, "store": store, "frames": frames, "root": root, "settings": settings,
            "cal_path": cal_path,
        }
    finally:
        client.close()
        serve.delete(APP)


def test_a_trading_week_is_recorded_scored_and_adapts(week_service):
    from kronos_core.calibration.conformal import Calibration
    from kronos_core.ledger.adaptive import OnlineCalibration
    from kronos_core.ledger.ledger import Ledger

    client, store, frames, root = (week_service[k] for k in ("client", "store", "frames", "root"))
    ledger = Ledger(root / "ledger")
    state_file = root / "ledger" / "calibration" / "aci.state.json"
    days = frames["GOOG"]["timestamps"][frames["GOOG"]["timestamps"] > CUT].iloc[:5].tolist()
    ask = {"symbols": list(SYMBOLS), "horizon": HORIZON, "lookback": 96, "sample_count": 8,
           "quantiles": [0.1, 0.5, 0.9]}

    # a forecast made as_of the past is scorable at once (its truths are in the store)
    past = frames["GOOG"]["timestamps"][frames["GOOG"]["timestamps"] <= CUT].iloc[-4]
    r = client.post("/v1/forecast", json={**ask, "as_of": past.isoformat(), "seed": 99})
    assert r.status_code == 200, r.text[:500]
    answers = [r.json()]

    def state_version() -> int:
        return json.loads(state_file.read_text())["version"] if state_file.exists() else 0

    known = CUT
    for d, day in enumerate([CUT, *days[:-1]]):
        if d:  # the day's real candles arrive (kronos import would append them the same way)
            for sym, df in frames.items():
                store.write(sym, df[df["timestamps"] == day], frequency="1d")
            known = day
        # recorded off the request path: wait for the writer
        n_rows = len(answers) * len(SYMBOLS) * HORIZON
        rows = wait_for(
            lambda n=n_rows: t if len(t := ledger.read().to_pandas()) == n else None, 30,
            "rows recorded",
        )
        want = direct_scores(rows, frames, known)
        assert len(want) > 0 and "close_q0.1" in rows.columns
        body = wait_for(
            lambda n=len(want): (
                (b := client.get("/v1/accuracy").json())["all_time"]["scored"] == n and b
            ),
            60, f"day {d}: {len(want)} steps scored",
        )
        version = wait_for(lambda d=d: state_version() if state_version() >= d + 1 else 0, 30,
                           f"day {d}: the ACI state updated") if len(want) else 0
        # /v1/accuracy against the direct computation on the same forecasts and truths
        assert body["all_time"]["coverage"]["0.8"] == pytest.approx(want["covered"].mean())
        assert body["all_time"]["crps"] == pytest.approx(want["crps"].mean())
        assert body["all_time"]["mae"] == pytest.approx(want["abs_error"].mean())
        assert body["rolling"]["scored"] == min(
            len(want), week_service["settings"].score_window_steps
        )
        model = answers[0]["model"]["name"]
        wait_for(
            lambda n=len(want), m=model: (
                metric(client, "kronos_forecasts_scored_total", {"model": m}) == n
            ),
            30, "the gauges set by the pass",
        )  # the pass sets them last
        assert metric(
            client, "kronos_forecast_coverage", {"model": model, "level": "0.8"}
        ) == pytest.approx(want["covered"].mean())
        assert metric(client, "kronos_forecast_crps", {"model": model}) == pytest.approx(
            want["crps"].mean()
        )
        # the day's forecast, made as_of the day, corrected by the state the scorer just left
        r = client.post("/v1/forecast", json={**ask, "as_of": day.isoformat(), "seed": d})
        assert r.status_code == 200, r.text[:500]
        ans = r.json()
        answers.append(ans)
        assert ans["calibrated"] is True
        assert ans["calibration_state"]["method"] == "aci"
        assert ans["calibration_state"]["version"] == version == state_version()
        assert [f["last_timestamp"][:10] for f in ans["forecasts"]] == [
            day.strftime("%Y-%m-%d")
        ] * 2

    # every answer is in the ledger, as answered, with the calibration state it used
    n_rows = len(answers) * len(SYMBOLS) * HORIZON
    rows = wait_for(
        lambda: t if len(t := ledger.read().to_pandas()) == n_rows else None, 30, "rows recorded"
    )
    assert len(rows) == len(answers) * len(SYMBOLS) * HORIZON
    for ans in answers:
        mine = rows[rows["request_id"] == ans["request_id"]]
        assert len(mine) == len(SYMBOLS) * HORIZON
        st = ans["calibration_state"]
        assert set(mine["calibration_version"]) == {st["version"]} and set(
            mine["calibration_hash"]
        ) == {st["hash"]}
        for f in ans["forecasts"]:
            got = mine[mine["symbol"] == f["symbol"]].sort_values("horizon_step")
            np.testing.assert_allclose(got["mean_close"], f["mean"]["close"], rtol=1e-6)
            np.testing.assert_allclose(got["close_q0.9"], f["quantiles"]["0.9"]["close"], rtol=1e-6)
    (root / "example.json").write_text(
        json.dumps(
            {  # what docs/ledger.md's worked example (In the service) shows
                "request": {**ask, "as_of": day.isoformat(), "seed": d}, "answer": answers[-1],
                "accuracy": client.get("/v1/accuracy").json(),
                "accuracy_step1": client.get(
                    "/v1/accuracy", params={"symbol": "GOOG", "horizon_step": 1}
                ).json(),
            },
            indent=1,
        )
    )
    versions = [a["calibration_state"]["version"] for a in answers]
    assert versions == sorted(versions) and versions[-1] >= 4  # the correction followed the week

    # the persisted scores equal the direct ones, each step once
    scores = ledger.read_scores().to_pandas()
    want = direct_scores(rows, frames, known)
    assert (
        len(scores)
        == len(want)
        == len(scores.drop_duplicates(["request_id", "symbol", "horizon_step"]))
    )
    merged = scores.merge(
        want, on=["request_id", "symbol", "horizon_step"], suffixes=("", "_direct")
    )
    np.testing.assert_allclose(merged["crps"], merged["crps_direct"], rtol=1e-9)
    np.testing.assert_allclose(merged["covered_0.8"], merged["covered"], rtol=0)

    # the ACI state the service persisted equals an offline walk over the same scored steps
    replay = root / "replay" / "aci.state.json"
    shutil.copytree(
        state_file.with_name(state_file.name + ".d"), replay.with_name(replay.name + ".d")
    )
    import pyarrow as pa

    table = pa.Table.from_pandas(
        want.drop(columns=["covered", "crps", "abs_error"]), preserve_index=False
    )
    offline = OnlineCalibration(Calibration.load(week_service["cal_path"]), replay)
    offline.update(table)
    served = json.loads(state_file.read_text())["aci_state"]
    np.testing.assert_allclose(
        offline.calibration.state.alpha, np.asarray(served["alpha"]), atol=1e-12
    )
    np.testing.assert_allclose(
        offline.calibration.state.scores, np.asarray(served["scores"]), atol=1e-9
    )


def test_a_corrupt_ledger_file_is_never_a_500(week_service):
    client, root = week_service["client"], week_service["root"]
    before = client.get("/v1/accuracy").json()["all_time"]["scored"]
    for part in (
        sorted((root / "ledger").glob("date=*"))[:1]
        + sorted((root / "ledger" / "scores").glob("date=*"))[:1]
    ):
        (part / "zz-corrupt-0.parquet").write_bytes(b"PAR1 this is not a parquet file")
    r = client.get("/v1/accuracy")
    assert r.status_code == 200, r.text[:300]
    assert r.json()["all_time"]["scored"] == before  # the bad files add nothing and take nothing
    r = client.post("/v1/forecast", json={"symbols": ["GOOG"], "horizon": 2, "lookback": 32})
    assert r.status_code == 200  # recording and scoring go on beside them
