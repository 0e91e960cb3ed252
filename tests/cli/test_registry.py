"""The ``kronos`` command registry: the core's commands plus those registered under the
``kronos.commands`` entry-point group (the service's and the load tools'), every one answering
``--help``."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
from import_rules import lines_naming

import kronos_core.cli as cli

REPO = Path(__file__).resolve().parents[2]
tomllib = (
    pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
)


def _declared_entry_points() -> list[metadata.EntryPoint]:
    """The repository's own declaration (pyproject.toml), whatever the installed metadata says."""
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][
        cli.ENTRY_POINT_GROUP
    ]
    return [
        metadata.EntryPoint(name, value, cli.ENTRY_POINT_GROUP) for name, value in table.items()
    ]


@pytest.fixture
def registered(monkeypatch):
    eps = _declared_entry_points()
    monkeypatch.setattr(cli.metadata, "entry_points",
                        lambda group=None: [e for e in eps if group in (None, e.group)])
    return cli.all_commands()


def test_service_commands_come_from_the_entry_point(registered):
    assert {"serve", "bench service", "loadtest"} <= set(registered) - set(cli.COMMANDS)
    assert {"forecast", "import", "bench engine", "bench store", "train"} <= set(cli.COMMANDS)


def test_the_core_never_names_service_modules():
    offenders = lines_naming("kronos_core", "service")
    assert not offenders, offenders


def test_every_command_answers_help(registered, capsys):
    for name in registered:
        with pytest.raises(SystemExit) as ei:
            cli.main([*name.split(), "--help"])
        assert ei.value.code == 0, name
        out = capsys.readouterr().out
        assert out.startswith(f"usage: kronos {name}"), (name, out[:200])
        # the one-line help is the description
        assert registered[name][1] in " ".join(out.split()), name


def test_top_level_help_lists_every_command(registered, capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    for name in registered:
        assert name in out, name


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--series", "2"], (0, 1, "bench engine")),  # `kronos bench` keeps working
    (["bench", "engine", "--series", "2"], (0, 2, "bench engine")),
    (["-v", "bench", "store", "--symbols", "3"], (1, 2, "bench store")),
    (["bench-store"], (0, 1, "bench store")),  # the older spelling
    (["bench", "service"], (0, 2, "bench service")),
    (["loadtest", "--users", "2"], (0, 1, "loadtest")),
    (["nonsense"], None),
    (["-v"], None),
])
def test_command_names_of_one_or_two_words(registered, argv, expected):
    assert cli.resolve(argv, registered) == expected


def test_a_missing_plugin_is_not_listed(monkeypatch):
    monkeypatch.setattr(cli.metadata, "entry_points", lambda group=None: [])
    assert set(cli.all_commands()) == set(cli.COMMANDS)
    # unknown without the service installed: the usage, exit 2
    with pytest.raises(SystemExit) as ei:
        cli.main(["serve"])
    assert ei.value.code == 2


@pytest.mark.parametrize(
    "module, command",
    [
        ("loadtests.run", "kronos loadtest"), ("loadtests.soak", "kronos soak"),
        ("loadtests.bench", "kronos bench service"),
    ],
)
def test_python_m_forms_are_the_kronos_commands(module, command, capsys):
    """``python -m loadtests.soak`` and the others go through ``kronos``'s own command line: the
    same flags, usage line and errors (one parser per command, not one per spelling)."""
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as ei:
        main(["--help"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {command} ")
    with pytest.raises(SystemExit) as ei:
        main(["--no-such-flag"])
    assert (
        ei.value.code == 2 and "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    )


def test_every_core_command_lives_in_the_cli_package():
    assert all(module.startswith("kronos_core.cli.") for module, _help in cli.COMMANDS.values()), (
        cli.COMMANDS
    )
