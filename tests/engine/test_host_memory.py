"""The CPU engine's allocator settings (kronos_core.engine.host_memory)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

def _run(env_value: str | None) -> str:
    """``keep_freed_memory`` twice in a fresh interpreter: its two answers and what it kept."""
    env = {k: v for k, v in os.environ.items() if k != "KRONOS_MALLOC_TUNING"}
    if env_value is not None:
        env["KRONOS_MALLOC_TUNING"] = env_value
    code = (
        "from kronos_core.engine import host_memory\n"
        "first = host_memory.keep_freed_memory()\n"
        "print(first, host_memory.keep_freed_memory(), host_memory._applied)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's mallopt; another C library keeps "
                                      "its own")
def test_glibc_takes_the_settings_once_per_process():
    assert _run(None) == "True True True"


def test_the_environment_switch_leaves_the_allocator_alone():
    assert _run("0") == "False False False"


def test_a_cpu_predictor_applies_them(tiny, monkeypatch):
    from kronos_core.engine import host_memory
    from kronos_core.predictor import KronosPredictor

    monkeypatch.setattr(host_memory, "_applied", None)  # as in a fresh process
    KronosPredictor(*tiny, device="cpu", max_context=64)
    assert host_memory._applied is (GLIBC and os.environ.get(host_memory.ENV) != "0")
