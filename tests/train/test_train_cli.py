"""``kronos train``: config validation, flags over YAML, a run whose output loads in
KronosPredictor."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from train_helpers import GOOG, tiny_overrides, write_config_yaml

from kronos_core.cli import main
from kronos_core.train.config import ConfigFileError, load_config


def _yaml_for(tmp_path, **extra) -> str:
    overrides = {**tiny_overrides(tmp_path / "x"), **extra}
    return str(
        write_config_yaml(tmp_path / "tiny.yaml", overrides, skip=("out", "kind", "data.paths"))
    )


def test_unknown_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim:\n  lrate: 0.1\n")
    with pytest.raises(ConfigFileError, match=r"optim\.lrate"):
        load_config(bad)


def test_flags_override_the_file(tmp_path):
    path = _yaml_for(tmp_path, max_steps=9)
    cfg = load_config(path, {"max_steps": 3, "optim.lr": None})
    assert cfg.max_steps == 3 and cfg.model.d_model == 16 and cfg.optim.lr == 1e-3


def test_window_longer_than_context_is_refused():
    with pytest.raises(ConfigFileError, match="max_context"):
        load_config(None, {"max_context": 16, "data.lookback": 32})


def test_predictor_run_on_an_unseen_csv_loads_in_the_predictor(tmp_path, capsys):
    # a CSV the project never shipped: GOOG rows with other column order and a 'date' column
    df = pd.read_csv(GOOG).rename(columns={"timestamps": "date"})
    csv = tmp_path / "unseen.csv"
    df[["date", "close", "open", "low", "high", "volume"]].iloc[:900].to_csv(csv, index=False)
    out = tmp_path / "run"
    args = [
        "train", "predictor", "--config", _yaml_for(tmp_path, **{"data.timestamp_column": "date"}),
        "--data", str(csv), "--max-steps", "2", "--out", str(out),
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2
    assert main([*args[:-4], "--max-steps", "3", "--out", str(out), "--resume"]) == 0
    assert [
        r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    ] == [1, 2, 3]

    from kronos_core import KronosPredictor
    from kronos_core.model import Kronos, KronosTokenizer

    for which in ("best", "last"):
        folder = out / which
        assert json.loads((folder / "kronos.json").read_text())["max_context"] == 64
        predictor = KronosPredictor(
            Kronos.from_pretrained(folder / "model"),
            KronosTokenizer.from_pretrained(folder / "tokenizer"), device="cpu", max_context=64,
        )
        hist = pd.read_csv(GOOG, parse_dates=["timestamps"]).iloc[:40]
        future = pd.Series(pd.date_range(hist["timestamps"].iloc[-1], periods=4, freq="D")[1:])
        pred = predictor.predict(
            hist.drop(columns="timestamps"), hist["timestamps"], future, pred_len=3, top_k=1,
            verbose=False,
        )
        assert pred.shape == (3, 6) and pred.notna().all().all()


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    code = main(
        [
            "train", "predictor", "--config", _yaml_for(tmp_path), "--data",
            str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o"),
        ]
    )
    assert code == 2 and "nope.csv" in capsys.readouterr().err


def test_bench_measures_one_variant(tmp_path):
    from kronos_core.train.bench import measure

    overrides = {
        k: v for k, v in tiny_overrides(tmp_path / "b").items() if k not in ("out", "kind")
    }
    figures = measure(None, {**overrides, "accum_steps": 2}, steps=1)
    assert figures["samples_per_s"] > 0 and figures["micro_batch"] == 4 and figures["accum"] == 2
    assert figures["peak_rss_mb"] > figures["train_growth_mb"] >= 0
    assert figures["planner_mb"] is not None and figures["planner_mb"] > 0


def test_tokenizer_run_end_to_end_then_a_predictor_on_it(tmp_path):
    from kronos_core.model import KronosTokenizer

    tok_out, pred_out = tmp_path / "tok", tmp_path / "pred"
    config = _yaml_for(tmp_path)
    assert main(["train", "tokenizer", "--config", config, "--data", str(GOOG), "--max-steps", "2",
                 "--out", str(tok_out)]) == 0
    tok = KronosTokenizer.from_pretrained(tok_out / "best" / "tokenizer")
    # the config's size, trained from scratch
    assert (tok.config.s1_bits, tok.config.d_model) == (4, 16)
    assert main(["train", "predictor", "--config", config, "--data", str(GOOG), "--max-steps", "1",
                 "--tokenizer", str(tok_out / "best" / "tokenizer"), "--out", str(pred_out)]) == 0
    saved = KronosTokenizer.from_pretrained(pred_out / "best" / "tokenizer")
    for a, b in zip(tok.state_dict().values(), saved.state_dict().values()):
        assert a.equal(b)  # the predictor run kept its tokenizer frozen and stored it


def test_init_from_the_bundled_model_by_name_and_a_bad_name_without_traceback(tmp_path, capsys):
    out = tmp_path / "ft"
    args = [
        "train", "predictor", "--data", str(GOOG), "--lookback", "24", "--horizon", "8",
        "--batch-size", "4", "--max-steps", "1", "--device", "cpu", "--threads", "1", "--out",
        str(out),
    ]
    assert main([*args, "--init", "kronos-default"]) == 0
    # the bundled model's
    assert json.loads((out / "best" / "kronos.json").read_text())["max_context"] == 256
    capsys.readouterr()
    assert main([*args, "--init", "kronos-nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kronos train: ") and "kronos-nope" in err and "Traceback" not in err


def test_ctrl_c_prints_how_to_resume_and_exits_130(tmp_path, capsys, monkeypatch):
    from kronos_core.train.trainer import Trainer

    real_step = Trainer.train_step

    def step(self, batch):
        if self.step == 3:  # during step 4; last/ holds step 2 (save_every 2)
            raise KeyboardInterrupt
        return real_step(self, batch)

    monkeypatch.setattr(Trainer, "train_step", step)
    out = tmp_path / "run"
    args = [
        "train", "predictor", "--config", _yaml_for(tmp_path), "--data", str(GOOG), "--out",
        str(out),
    ]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert (
        "interrupted at step 3" in err and f"{out}/last holds step 2" in err and "--resume" in err
    )
    assert f"kronos train predictor ... --out {out} --resume" in err
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert main([*args, "--resume"]) == 0  # the hint's command works
    assert json.loads(capsys.readouterr().out)["steps"] == 4


def test_train_reads_a_vendor_file_with_the_reader_flags(tmp_path, capsys):
    """kronos train takes the reader's flags too: a vendor file with a NaN row and a renamed
    volume column, newest first, trains with --drop-nan --column volume=Vol."""
    df = pd.read_csv(GOOG).iloc[:400]
    vendor = pd.DataFrame(
        {
            "Date": df["timestamps"], "Open": df["open"], "High": df["high"], "Low": df["low"],
            "Close": df["close"], "Adj Close": df["close"], "Vol": df["volume"],
        }
    ).iloc[::-1]
    vendor.iloc[5, 4] = float("nan")
    csv = tmp_path / "vendor.csv"
    vendor.to_csv(csv, index=False)
    args = [
        "train", "predictor", "--config", _yaml_for(tmp_path), "--data", str(csv), "--max-steps",
        "1", "--out", str(tmp_path / "run"),
    ]
    assert main(args) == 2
    assert "--drop-nan" in capsys.readouterr().err  # refused, naming the row and the flag
    assert main([*args, "--drop-nan", "--column", "volume=Vol", "--time-column", "Date"]) == 0
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["data"]
    assert written["repairs"] == ["drop_nan", "sort"] and written["columns"] == {"volume": "Vol"}
