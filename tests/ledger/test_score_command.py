"""``kronos score``: scores what is scorable and prints a table per model and horizon step."""

from __future__ import annotations

import json

from ledger_helpers import append, candles, make_store, record

from kronos_core.cli import COMMANDS, main
from kronos_core.cli.score import resolve_dirs
from kronos_core.ledger import Ledger, default_ledger_dir


def test_score_command_prints_a_table_and_scores_once(tmp_path, capsys):
    f = candles(40)
    store = make_store(tmp_path / "store", {"AAA": f.iloc[:20]})
    led = Ledger(default_ledger_dir(tmp_path / "store"))
    led.record([record("AAA", f.timestamps.iloc[19], 3)])
    append(store, "AAA", f.iloc[20:22])
    assert main(["score", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "scored 2 new forecast steps (1 waiting" in out
    lines = [ln for ln in out.splitlines() if "test-model" in ln]
    assert len(lines) == 2 and lines[0].split()[2] == "1"  # model name, sha, step 1
    assert "cov 0.8" in out
    assert main(["score", "--store", str(tmp_path / "store"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scored_now"] == 0 and doc["waiting"] == 1
    assert [r["horizon_step"] for r in doc["rows"]] == [1, 2]
    assert (
        main(["score", "--store", str(tmp_path / "store"), "--since", "2099-01-01", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["rows"] == []  # only forecasts requested since then
    assert main(["score", "--store", str(tmp_path / "store"), "--window", "1"]) == 0
    assert "the last 1 scored steps" in capsys.readouterr().out


def test_score_command_defaults_and_missing_folders(tmp_path, capsys, monkeypatch):
    assert "score" in COMMANDS
    monkeypatch.setenv("KRONOS_STORE_DIR", str(tmp_path / "s"))
    monkeypatch.delenv("KRONOS_LEDGER_DIR", raising=False)
    assert resolve_dirs(None, None) == (tmp_path / "s", tmp_path / "s" / "_ledger")
    monkeypatch.setenv("KRONOS_LEDGER_DIR", str(tmp_path / "l"))
    assert resolve_dirs(None, None) == (tmp_path / "s", tmp_path / "l")
    assert main(["score"]) == 2
    assert "no store at" in capsys.readouterr().err
    (tmp_path / "s").mkdir()
    assert main(["score"]) == 2
    assert "no ledger at" in capsys.readouterr().err
