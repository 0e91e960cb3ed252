"""The chaos side of ``kronos soak``: every N seconds, ``ray.kill`` a random predictor replica
of the service (Serve's controller then starts a replacement), and time how long the service
takes to have all its replicas running again (``/readyz``'s ``replicas_ready``).

The soak connects to the service's own Ray cluster, found from the GCS process in the
service's process tree, never to whatever ``address="auto"`` picks: other Ray clusters may run
on the same machine."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
import urllib.request

import psutil

log = logging.getLogger(__name__)


def gcs_address(root_pid: int) -> str:
    """``ip:port`` of the GCS of the Ray cluster in ``root_pid``'s process tree: the
    ``--gcs-address`` its raylet and helper processes are given (the GCS server itself may be
    started on port 0 and pick one), else a GCS server's own fixed port."""
    root = psutil.Process(root_pid)
    cmds = []
    for p in [root, *root.children(recursive=True)]:
        try:
            cmds.append(" ".join(p.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for cmd in cmds:
        if m := re.search(r"--gcs-address[= ](\S+:[1-9]\d*)", cmd):
            return m.group(1)
    for cmd in cmds:
        port = re.search(r"--gcs_server_port[= ]([1-9]\d*)", cmd)
        ip = re.search(r"--node-ip-address[= ](\S+)", cmd)
        if port and ip:
            return f"{ip.group(1)}:{port.group(1)}"
    raise RuntimeError(
        f"no Ray GCS in the process tree of pid {root_pid}: is it the service's root?"
    )


# how a client must talk to the cluster (no secrets)
AUTH_SETTINGS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")


def ray_auth_settings(root_pid: int) -> dict[str, str]:
    """The Ray authentication mode (and token file) the service's Ray processes run with: a
    client connecting to a cluster with ``RAY_AUTH_MODE=token`` must set it too (the token
    itself Ray reads from its file, ``~/.ray/auth_token`` by default)."""
    root = psutil.Process(root_pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            if p.name() in ("raylet", "gcs_server"):
                env = p.environ()
                return {k: env[k] for k in AUTH_SETTINGS if k in env}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return {}


def replicas_ready(url: str) -> int:
    """``replicas_ready`` of the service's ``/readyz`` (0 when it is not answering)."""
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=10) as r:
            return int(json.loads(r.read()).get("replicas_ready", 0))
    except (OSError, ValueError) as exc:
        if hasattr(exc, "read"):  # 503 still carries the body
            try:
                return int(json.loads(exc.read()).get("replicas_ready", 0))
            except (OSError, ValueError):
                pass
        return 0


class ChaosMonkey(threading.Thread):
    """Kills one random ``Predictor`` replica of app ``app`` every ``every_s`` seconds, from
    ``every_s`` after ``start()`` until ``until_s`` or ``finish()``. ``events`` lists the kills:
    time, replica id, replicas alive before, seconds until every replica ran again (None when
    the next kill came first)."""

    def __init__(self, gcs: str, url: str, app: str, every_s: float, seed: int = 0,
                 auth: dict[str, str] | None = None, until_s: float = float("inf")):
        super().__init__(name="soak-chaos", daemon=True)
        self.until_s = until_s  # no kill from this many seconds on (the load has ended)
        self.gcs, self.url, self.app, self.every_s = gcs, url, app, every_s
        self.auth = auth or {}
        self.rng = random.Random(seed)
        self.events: list[dict] = []
        self.errors: list[str] = []
        self.target = 0
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def _replicas(self) -> list[tuple[str, str]]:
        import ray

        prefix = f"SERVE_REPLICA::{self.app}#Predictor#"
        return [(a["namespace"], a["name"]) for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith(prefix)]

    def run(self) -> None:
        # before Ray reads its config: this process talks as the cluster expects
        os.environ.update(self.auth)
        import ray

        try:
            ray.init(address=self.gcs, namespace="kronos-soak", log_to_driver=False,
                     logging_level=logging.WARNING)
            self.target = len(self._replicas())
        except Exception as exc:
            self.errors.append(
                f"cannot connect to the service's Ray at {self.gcs}: {type(exc).__name__}: {exc}"
            )
            return
        self._t0 = time.monotonic()
        n = 1
        while n * self.every_s < self.until_s and not self._halt.wait(
                max(0.0, self._t0 + n * self.every_s - time.monotonic())):
            try:
                self._kill_one(next_kill=self._t0 + (n + 1) * self.every_s)
            except Exception as exc:  # record it; the soak reports it and fails
                log.exception("chaos: kill failed")
                self.errors.append(f"{type(exc).__name__}: {exc}")
            n += 1

    def _kill_one(self, next_kill: float) -> None:
        """Kill a random predictor replica; time its recovery until ``next_kill`` (monotonic)."""
        import ray

        alive = self._replicas()
        if not alive:
            self.errors.append(
                f"t={time.monotonic() - self._t0:.0f}s: no predictor replica alive to kill"
            )
            return
        namespace, name = self.rng.choice(alive)
        t = time.monotonic()
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
        event = {"t_s": round(t - self._t0, 1), "replica": name.rsplit("#", 1)[-1],
                 "replicas_before": len(alive), "recovered_after_s": None}
        self.events.append(event)
        log.info("chaos: killed replica %s", event["replica"])
        while not self._halt.wait(0.5) and time.monotonic() < next_kill:
            if self._recovered(name):
                event["recovered_after_s"] = round(time.monotonic() - t, 1)
                return

    def _recovered(self, killed: str) -> bool:
        """A replacement of ``killed`` exists and every replica runs (Serve notices a death only
        at its next health check, so ``/readyz`` alone would count the dead one a while)."""
        names = [n for _, n in self._replicas()]
        return (
            killed not in names
            and len(names) >= self.target
            and replicas_ready(self.url) >= self.target
        )

    def finish(self, recover_timeout_s: float = 180.0) -> bool:
        """Stop killing; wait until every replica runs again (the last kill's recovery is
        timed too). True when they all do within ``recover_timeout_s``."""
        import ray

        self._halt.set()
        self.join(timeout=60)
        if not ray.is_initialized():
            self.errors.append(f"never connected to the service's Ray at {self.gcs}")
            return False
        deadline = time.monotonic() + recover_timeout_s
        killed = [f"SERVE_REPLICA::{self.app}#Predictor#{e['replica']}" for e in self.events[-1:]]
        ok = False
        while time.monotonic() < deadline:
            if all(self._recovered(k) for k in killed) and replicas_ready(self.url) >= self.target:
                ok = True
                break
            time.sleep(0.5)
        last = self.events[-1] if self.events else None
        # earlier ones: the next kill came first
        if ok and last is not None and last["recovered_after_s"] is None:
            last["recovered_after_s"] = round(time.monotonic() - self._t0 - last["t_s"], 1)
        if ray.is_initialized():
            ray.shutdown()  # disconnects this driver; the service's cluster runs on
        return ok
