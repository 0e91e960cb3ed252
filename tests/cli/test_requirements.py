"""Every command checks the optional packages its flags need before any work, and says what
to install (issue 26, item 7: ``kronos eval --plot`` used to work 4 minutes, then fail)."""

from __future__ import annotations

import importlib

import pytest

from kronos_core.cli import main, requirements


@pytest.fixture()
def without(monkeypatch):
    """Make the named modules look uninstalled to the check (the real ones stay importable)."""
    gone: set[str] = set()
    real = requirements.installed
    monkeypatch.setattr(requirements, "installed", lambda m: m not in gone and real(m))
    return gone


def _no_work(monkeypatch, module: str):
    def run(args):
        pytest.fail(f"{module}.run started without its optional package")

    monkeypatch.setattr(importlib.import_module(module), "run", run)


@pytest.mark.parametrize("argv, module, missing, extra", [
    (["eval", "--data", "a.csv", "--horizon", "5", "--plot", "plots"], "kronos_core.cli.eval",
     "matplotlib", "eval"),
    (["eval", "--data", "a.csv", "--horizon", "5"], "kronos_core.cli.eval", "arch", "eval"),
    (["backtest", "--data", "a.csv", "--horizon", "5", "--rebalance", "5", "--top", "1",
      "--out", "bt"], "kronos_core.cli.backtest", "matplotlib", "eval"),
    (["forecast", "--csv", "a.csv", "--horizon", "3", "--out", "f.xlsx"],
     "kronos_core.cli.forecast", "openpyxl", "xlsx"),
    (["train", "predictor", "--backend", "ray"], "kronos_core.cli.train", "ray", "train"),
    (["serve"], "service.cli", "fastapi", "serve"),
    (["loadtest"], "loadtests.run", "locust", "load"),
])
def test_a_missing_optional_package_is_named_before_any_work(argv, module, missing, extra, without,
                                                              monkeypatch, capsys):
    without.add(missing)
    _no_work(monkeypatch, module)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"needs {missing} (extra {extra}" in err and f"-e '.[{extra}]'" in err


def test_without_the_flag_nothing_optional_is_needed(without, monkeypatch):
    without.add("matplotlib")
    called = []
    eval_cli = importlib.import_module("kronos_core.cli.eval")
    monkeypatch.setattr(eval_cli, "run", lambda args: called.append(1) or 0)
    assert main(["eval", "--data", "a.csv", "--horizon", "5"]) == 0 and called == [1]


def test_a_command_module_that_cannot_import_names_its_extra():
    exc = ModuleNotFoundError("No module named 'fastapi'", name="fastapi")
    assert requirements.module_missing_message("serve", exc).startswith(
        "kronos serve: needs fastapi (extra serve), not installed; install with: pip install")
