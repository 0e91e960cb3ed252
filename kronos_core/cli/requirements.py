"""Optional packages a command needs, checked before it starts any work.

The core's dependencies run every core command. Some commands, or some of their flags, need
a package of an extra (``pyproject.toml``): ``kronos eval --plot`` needs matplotlib
(``eval``), ``kronos serve`` the ``serve`` extra. A command module declares them with
``requires(args) -> list[Need]``; ``kronos_core.cli.main`` checks them right after parsing
the flags, so a missing package is named at once, with the line that installs it, instead
of after minutes of work. ``EXTRA_OF`` maps a module to its extra for a command module that
cannot even be imported without it (``kronos serve`` without fastapi).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# import name -> the extra (pyproject.toml) that installs it
EXTRA_OF: dict[str, str] = {
    "matplotlib": "eval",
    "arch": "eval",
    "empyrical": "eval",
    "openpyxl": "xlsx",
    "locust": "load",
    "huggingface_hub": "hub",
    "fastapi": "serve",
    "uvicorn": "serve",
    "ray": "serve",
    "prometheus_client": "serve",
    "pydantic_settings": "serve",
    "httpx": "serve",
    "orjson": "serve",
}

SERVE_MODULES = ("fastapi", "uvicorn", "ray", "prometheus_client", "pydantic_settings", "httpx",
                 "orjson")


@dataclass(frozen=True)
class Need:
    """A package a command needs: its import name, its extra, and what needs it (a flag)."""

    module: str
    extra: str
    why: str = ""


def needs(modules, why: str = "") -> list[Need]:
    """``Need``s of ``modules`` (import names in ``EXTRA_OF``)."""
    return [Need(m, EXTRA_OF[m], why) for m in modules]


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return False


def install_line(extras) -> str:
    extras = ",".join(sorted(set(extras)))
    return (f"pip install 'kronos-portfolio[{extras}]' "
            f"(from a checkout: pip install -e '.[{extras}]')")


def missing_message(command: str, wanted: list[Need]) -> str | None:
    """The message naming every missing package of ``wanted`` and how to install them, or None."""
    gone = [n for n in wanted if not installed(n.module)]
    if not gone:
        return None
    parts = [f"{n.module} (extra {n.extra}{', for ' + n.why if n.why else ''})" for n in gone]
    return (f"kronos {command}: needs {', '.join(parts)}, not installed; "
            f"install with: {install_line(n.extra for n in gone)}")


def module_missing_message(command: str, exc: ModuleNotFoundError) -> str:
    """For a command module that failed to import: the extra of the missing module, if known."""
    name = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(name)
    if extra is None:
        return f"kronos {command}: unavailable ({exc}); is the right extra installed?"
    return (f"kronos {command}: needs {name} (extra {extra}), not installed; "
            f"install with: {install_line([extra])}")
