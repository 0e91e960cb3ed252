"""ResourceMonitor: time series, summary, warnings and the JSON report.

This machine has no GPU, so the GPU path runs against ``FakeNVML``, a stand-in
for the ``pynvml`` module that answers the three calls the monitor makes with
figures the test chooses.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from kronos_core.base.monitor import ResourceMonitor


class FakeNVML:
    """Answers ``nvmlDeviceGetHandleByIndex``, ``...UtilizationRates`` and ``...MemoryInfo``."""

    def __init__(self, util: float, used: int, total: int = 80 * 2**30):
        self.util, self.used, self.total = util, used, total
        self.indices: list[int] = []

    def nvmlDeviceGetHandleByIndex(self, index):
        self.indices.append(index)
        return f"gpu{index}"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self.util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=self.used, total=self.total, free=self.total - self.used)


def _busy(seconds: float) -> int:
    end, x = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        x += 1
    return x


def test_report_has_timeseries_summary_and_throughput(tmp_path):
    with ResourceMonitor(interval=0.02, gpu=False) as m:
        block = bytearray(64 * 2**20)  # 64 MiB resident once touched
        block[:: 4096] = b"x" * len(block[:: 4096])
        for _ in range(4):
            _busy(0.05)
            m.step(n_samples=8)
        # The sampler thread runs every 20 ms but a loaded machine can starve it; wait (bounded)
        # for the five rows the report is checked for instead of assuming the 0.2 s were enough.
        deadline = time.monotonic() + 30
        while len(m.samples) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    report = m.report(tmp_path / "run.json")
    on_disk = json.loads((tmp_path / "run.json").read_text())
    assert on_disk["summary"] == report["summary"]
    s = report["summary"]
    assert len(report["timeseries"]) >= 5 and s["n_timeseries_samples"] == len(report["timeseries"])
    assert s["steps"] == 4 and s["samples"] == 32
    # each step busied 0.05 s; the mean cannot exceed the monitored span's share (no wall limit)
    assert s["step_time_mean_s"] > 0.04
    assert s["step_time_mean_s"] * s["steps"] <= s["seconds"] * 1.001  # timing-ok: consistency
    assert s["samples_per_s"] == pytest.approx(32 / s["seconds"])
    assert s["rss_bytes_peak"] >= 64 * 2**20 and s["rss_bytes_peak"] >= s["rss_bytes_mean"]
    assert s["cpu_percent_peak"] > 0
    assert report["gpu_sampled"] is False and s["gpu_util_percent_mean"] is None
    ts = [row["t"] for row in report["timeseries"]]
    assert ts == sorted(ts)
    del block


def test_idle_gpu_warns_of_data_loading():
    fake = FakeNVML(util=20, used=10 * 2**30)
    with ResourceMonitor(interval=0.01, nvml=fake, gpu_index=3) as m:
        time.sleep(0.05)
    report = m.report()
    assert fake.indices == [3]
    assert report["gpu_sampled"] is True
    assert report["summary"]["gpu_util_percent_mean"] == pytest.approx(20)
    assert report["summary"]["gpu_mem_used_bytes_peak"] == 10 * 2**30
    assert any("data loading" in w for w in report["warnings"])
    assert not any("GPU memory" in w for w in report["warnings"])


def test_busy_full_gpu_warns_of_memory_only():
    fake = FakeNVML(util=97, used=int(0.95 * 80 * 2**30))
    with ResourceMonitor(interval=0.01, nvml=fake) as m:
        time.sleep(0.05)
    warnings = m.report()["warnings"]
    assert any("GPU memory peaked at 95%" in w for w in warnings)
    assert not any("data loading" in w for w in warnings)


def test_series_is_thinned_when_long():
    with ResourceMonitor(interval=0.001, max_samples=20, gpu=False) as m:
        # until the series was thinned at least once: 0.2 s were enough on a quiet machine, but a
        # loaded one starved the sampler below 20 samples (bounded: a hang guard, not a timing)
        deadline = time.monotonic() + 60
        while m._stride == 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    report = m.report()
    assert len(report["timeseries"]) <= 21
    assert report["interval_s"] > 0.001


def test_rejects_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        ResourceMonitor(interval=0)
