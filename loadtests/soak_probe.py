"""What ``kronos soak`` watches: the resident memory (RSS) and open file descriptors of every
process of a running service (the ``kronos serve`` driver, Ray's GCS and raylet, Serve's
controller and proxy, the gateway and predictor replica workers), sampled every few seconds,
and whether they stay flat after warm-up.

Only psutil; no Ray import. A service's process tree is the root (the process that started
Ray, e.g. ``kronos serve``) and all its descendants; ``find_root`` finds it from the HTTP port.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

import psutil

# Ray names its worker processes after the actor they run ("ray::ServeReplica:kronos:Predictor")
_ROLES = (
    ("ray::ServeController", "serve_controller"),
    ("ray::ProxyActor", "serve_proxy"),
    (":Gateway", "gateway"),
    (":Predictor", "predictor"),
    ("ray::IDLE", "ray_idle_worker"),
    ("ray::DashboardAgent", "dashboard_agent"),
    ("ray::RuntimeEnvAgent", "runtime_env_agent"),
    ("default_worker.py", "ray_worker_starting"),
    ("dashboard/agent.py", "dashboard_agent"),
    ("runtime_env/agent", "runtime_env_agent"),
    ("log_monitor.py", "log_monitor"),
    ("monitor.py", "ray_monitor"),
    ("dashboard.py", "dashboard"),
)


_EXECUTABLES = {"gcs_server": "gcs", "raylet": "raylet"}


def role_of(proc: psutil.Process, root_pid: int | None = None) -> str:
    """A short name for what ``proc`` is in the service (``driver`` for the root)."""
    if proc.pid == root_pid:
        return "driver"
    try:
        name = proc.name()
        text = " ".join(proc.cmdline()) or name
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "gone"
    if name in _EXECUTABLES:
        return _EXECUTABLES[name]
    for needle, role in _ROLES:
        if needle in text:
            return role
    if text.startswith("ray::"):
        return "ray_worker:" + text[5:].split()[0]
    return name or "process"


def find_root(port: int) -> int:
    """The pid at the top of the service that listens on ``port``: the listener (Serve's proxy,
    a Ray worker) is a child of the raylet, whose parent started Ray (``kronos serve``, or a
    test session). Without such a parent (``ray start``), the raylet's own parent is init: then
    the listener's topmost non-init ancestor."""
    listeners = [c.pid for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid]
    if not listeners:
        raise RuntimeError(f"no process listens on port {port}; is the service running there?")
    proc = psutil.Process(listeners[0])
    chain = [proc, *proc.parents()]
    for i, p in enumerate(chain):
        if p.name() == "raylet" and i + 1 < len(chain) and chain[i + 1].pid != 1:
            return chain[i + 1].pid
    return [p for p in chain if p.pid != 1][-1].pid


@dataclass
class Sample:
    t: float  # seconds since the soak started
    procs: dict[int, tuple[str, int, int]]  # pid -> (role, rss bytes, open fds)


def sample_tree(root_pid: int, t: float, exclude: set[int] | frozenset = frozenset()) -> Sample:
    """RSS and open FDs of ``root_pid`` and every descendant, except the pids in ``exclude``
    (and their descendants: the soak's own processes when it runs inside the service's tree)."""
    root = psutil.Process(root_pid)
    skip = set(exclude)
    for pid in exclude:
        try:
            skip.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    procs: dict[int, tuple[str, int, int]] = {}
    for p in [root, *root.children(recursive=True)]:
        if p.pid in skip:
            continue
        try:
            with p.oneshot():
                role = role_of(p, root_pid)
                if role != "gone":
                    procs[p.pid] = (role, p.memory_info().rss, p.num_fds())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return Sample(t, procs)


@dataclass
class ProcessTrend:
    pid: int
    role: str
    rss_start: int  # median of the first `window` samples after warm-up (bytes)
    rss_end: int  # median of the last `window` samples
    rss_max: int
    fds_start: int
    fds_end: int
    fds_max: int
    samples: int

    @property
    def rss_growth_pct(self) -> float:
        return 100.0 * (self.rss_end - self.rss_start) / max(1, self.rss_start)

    @property
    def fd_growth(self) -> int:
        return self.fds_end - self.fds_start

    def as_dict(self) -> dict:
        mib = 1024 * 1024
        return {
            "pid": self.pid, "role": self.role, "samples": self.samples,
            "rss_start_mib": round(self.rss_start / mib, 1),
            "rss_end_mib": round(self.rss_end / mib, 1),
            "rss_max_mib": round(self.rss_max / mib, 1),
            "rss_growth_pct": round(self.rss_growth_pct, 2), "fds_start": self.fds_start,
            "fds_end": self.fds_end, "fds_max": self.fds_max,
            "fd_growth": self.fd_growth,
        }


@dataclass
class TreeReport:
    """Trends of the processes alive from warm-up to the end, and what came and went."""
    steady: list[ProcessTrend]
    gone: list[dict] = field(default_factory=list)  # died after warm-up (e.g. killed replicas)
    # started after warm-up (e.g. their replacements)
    late: list[dict] = field(default_factory=list)
    rss_tolerance_pct: float = 10.0

    @property
    def max_rss_growth_pct(self) -> float:
        return max((p.rss_growth_pct for p in self.steady), default=0.0)

    @property
    def max_fd_growth(self) -> int:
        return max((p.fd_growth for p in self.steady), default=0)

    @property
    def memory_flat(self) -> bool:
        return bool(self.steady) and self.max_rss_growth_pct <= self.rss_tolerance_pct

    @property
    def fds_flat(self) -> bool:
        return bool(self.steady) and self.max_fd_growth <= 0

    def as_dict(self) -> dict:
        total = (sum(p.rss_start for p in self.steady), sum(p.rss_end for p in self.steady))
        return {
            "memory_flat": self.memory_flat, "fds_flat": self.fds_flat,
            "rss_tolerance_pct": self.rss_tolerance_pct,
            "max_rss_growth_pct": round(self.max_rss_growth_pct, 2),
            "max_fd_growth": self.max_fd_growth, "total_rss_start_mib": round(total[0] / 2**20, 1),
            "total_rss_end_mib": round(total[1] / 2**20, 1),
            "processes": [p.as_dict() for p in self.steady], "gone_after_warmup": self.gone,
            "started_after_warmup": self.late,
        }


def analyse(samples: list[Sample], warmup_s: float, window: int = 3,
            rss_tolerance_pct: float = 10.0) -> TreeReport:
    """Per process alive in the first and the last sample after warm-up: start = median of its
    first ``window`` samples after warm-up, end = median of its last ``window`` (one slow
    sample does not decide). Processes that died or started in between are listed apart."""
    after = [s for s in samples if s.t >= warmup_s]
    if len(after) < 2:
        raise ValueError(f"{len(after)} samples after the {warmup_s:g} s warm-up; need at least 2 "
                         "(run longer, or sample more often)")
    first, last = after[0].procs, after[-1].procs
    steady = []
    for pid in sorted(set(first) & set(last)):
        series = [s.procs[pid] for s in after if pid in s.procs]
        rss = [r for _, r, _ in series]
        fds = [f for _, _, f in series]
        steady.append(
            ProcessTrend(
                pid, last[pid][0], int(statistics.median(rss[:window])),
                int(statistics.median(rss[-window:])), max(rss),
                int(statistics.median(fds[:window])), int(statistics.median(fds[-window:])),
                max(fds), len(series),
            )
        )
    seen_late: dict[int, str] = {}
    for s in after[1:]:
        for pid, (role, _, _) in s.procs.items():
            if pid not in first:
                seen_late[pid] = role
    gone = [{"pid": pid, "role": first[pid][0]} for pid in sorted(set(first) - set(last))]
    late = [
        {"pid": pid, "role": role, "alive_at_end": pid in last}
        for pid, role in sorted(seen_late.items())
    ]
    steady.sort(key=lambda p: (p.role, p.pid))
    return TreeReport(steady, gone, late, rss_tolerance_pct)


def load_averages() -> list[float]:
    """``uptime``'s 1, 5 and 15 minute load averages (the machine may be shared)."""
    return [round(x, 2) for x in os.getloadavg()]
