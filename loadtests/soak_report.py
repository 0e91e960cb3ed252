"""The summary of a ``kronos soak`` run: figures, the checks that decide pass or fail, and the
JSON + Markdown files (``summary.json``, ``summary.md``)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from kronos_core.base.errors import ErrorCode
from loadtests import soak_probe
from loadtests.report import markdown_table


def _forecast_rows(locust: dict) -> list[dict]:
    return [r for r in locust["endpoints"] if r["name"].startswith("/v1/forecast")]


def figures(locust: dict, counts: dict) -> dict:
    """The headline figures. ``failed`` excludes shed requests (503/429 with Retry-After)."""
    rows = _forecast_rows(locust)
    requests = sum(r["requests"] for r in rows)
    failed = sum(r["failures"] for r in rows) - locust["shed_503_429"]
    run_s = max(locust["run_time_s"], 1e-9)
    return {
        "run_time_s": locust["run_time_s"], "forecast_requests": requests,
        "answered_200": locust["ok_200"], "shed_503_429": locust["shed_503_429"], "failed": failed,
        "all_requests": locust["requests"],
        "failures_all_routes": locust["failures"],
        "requests_per_s": round(requests / run_s, 3), "series_per_s": locust["series_per_s"],
        "p50_ms": locust["p50_ms"], "p95_ms": locust["p95_ms"], "p99_ms": locust.get("p99_ms"),
        "max_ms": round(locust.get("max_ms") or 0), "shard_retries": counts["shard_retries"],
        "series_lost": counts["errors"].get(ErrorCode.REPLICA_UNAVAILABLE.value, 0),
        "service_forecast_200": counts["forecast_status"].get("200", 0),
        "service_series_forecast": counts["series_forecast"],
    }


def checks(fig: dict, memory: dict, chaos: dict | None, duration_s: float) -> dict:
    """Each condition of a passing soak, by name."""
    out = {
        "answered_some": fig["answered_200"] > 0,
        "no_failed_requests": fig["failed"] == 0 and fig["failures_all_routes"] == 0,
        "no_series_lost": fig["series_lost"] == 0,
        # every forecast request is answered, shed or failed; the service counted each 200 it sent
        "counts_add_up": fig["forecast_requests"]
        == fig["answered_200"] + fig["shed_503_429"] + fig["failed"]
        and fig["service_forecast_200"] >= fig["answered_200"],
        "memory_flat": memory["memory_flat"],
        "fds_flat": memory["fds_flat"],
    }
    if chaos is not None:
        expected = int(duration_s // chaos["every_s"])
        out["chaos_ran"] = not chaos["errors"] and len(chaos["kills"]) >= max(1, expected - 1)
        out["replicas_recovered"] = chaos["all_recovered_at_end"]
    return out


def command_line() -> str:
    """This run's command, spelled as ``kronos soak ...`` whichever way it was started."""
    argv = sys.argv[1:]
    if argv[:1] == ["soak"]:
        argv = argv[1:]
    return shlex.join(["kronos", "soak", *argv])


def summarise(
    args, parts: dict, *, url: str, root_pid: int, started_by_soak: bool, started_at: str
) -> dict:
    memory = soak_probe.analyse(
        parts["samples"], args.warmup, rss_tolerance_pct=args.rss_tolerance
    ).as_dict()
    fig = figures(parts["locust"], parts["counts"])
    ok = checks(fig, memory, parts["chaos"], args.duration)
    return {
        "kind": "soak with chaos" if parts["chaos"] else "soak", "passed": all(ok.values()),
        "checks": ok,
        "command": command_line(),
        "started_at": started_at, "url": url, "root_pid": root_pid,
        "service_started_by_soak": started_by_soak, "replicas": args.replicas,
        "duration_s": args.duration, "warmup_s": args.warmup, "sample_every_s": args.sample_every,
        "samples": len(parts["samples"]),
        "load": {
            "users": args.users, "spawn_rate": args.spawn_rate, "symbols": args.symbols,
            "horizon": args.horizon, "lookback": args.lookback, "wait_s": args.wait,
            "request_mix": "8:2 JSON (1 sample path) : Arrow (4 paths, quantiles 0.1/0.5/0.9)",
        },
        "machine": {
            "cpus": os.cpu_count(), "load_avg_start": parts["load_start"],
            "load_avg_end": parts["load_end"], "shared": "other jobs may run on the same cores",
        },
        "figures": fig, "service_counts": parts["counts"], "chaos": parts["chaos"],
        "memory": memory,
        "locust": parts["locust"],
    }


def _markdown(s: dict) -> list[str]:
    f, ld, m = s["figures"], s["load"], s["memory"]
    title = s["kind"] + (
        f" (a predictor replica killed every {s['chaos']['every_s']:g} s)" if s["chaos"] else ""
    )
    md = [
        f"# Soak: {title}: {'PASSED' if s['passed'] else 'FAILED'}",
        "", f"`{s['command']}`", "",
        f"{s['duration_s']:g} s of load from {ld['users']} locust users (pause {ld['wait_s']} s), "
        f"{ld['symbols']} symbols per request, horizon {ld['horizon']}, lookback {ld['lookback']}; "
        f"{ld['request_mix']}. Started {s['started_at']}; {s['machine']['cpus']} CPUs, shared with "
        f"other jobs: load averages (1/5/15 min) {s['machine']['load_avg_start']} at the start, "
        f"{s['machine']['load_avg_end']} at the end.", "",
        "| forecast requests | answered 200 | shed (503/429) | failed | series lost | req/s | "
        "series/s | p50 ms | p95 ms | p99 ms | max ms | shard retries |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {f['forecast_requests']} | {f['answered_200']} | {f['shed_503_429']} | {f['failed']} | "
        f"{f['series_lost']} | {f['requests_per_s']} | {f['series_per_s']} | {f['p50_ms']} | "
        f"{f['p95_ms']} | {f['p99_ms']} | {f['max_ms']} | {f['shard_retries']} |", "",
        "Checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in s["checks"].items()),
        "",
    ]
    if s["chaos"]:
        c = s["chaos"]
        md += [
            f"## Chaos: {len(c['kills'])} replica kills",
            "", "| t (s) | replica killed | replicas before | all running again after (s) |",
            "|---|---|---|---|",
        ]
        md += [
            f"| {k['t_s']} | {k['replica']} | {k['replicas_before']} | "
            f"{'not before the next kill' if k['recovered_after_s'] is None else k['recovered_after_s']} |"  # noqa: E501
            for k in c["kills"]
        ]
        md += [""] + [f"chaos error: {e}" for e in c["errors"]] + ([""] if c["errors"] else [])
    md += [
        f"## Memory and file descriptors after the {s['warmup_s']:g} s warm-up",
        "",
        f"Start = median of the first 3 samples after warm-up, end = median of the last 3 (every "
        f"{s['sample_every_s']:g} s, {s['samples']} samples). Max RSS growth "
        f"{m['max_rss_growth_pct']} % (limit {m['rss_tolerance_pct']:g} %), max FD growth "
        f"{m['max_fd_growth']}; all processes together {m['total_rss_start_mib']} -> "
        f"{m['total_rss_end_mib']} MiB.", "",
    ]
    md += markdown_table(
        [
            "process", "pid", "RSS start MiB", "RSS end MiB", "RSS max MiB", "growth %",
            "FDs start", "FDs end", "FDs max",
        ],
        [
            [
                p["role"], p["pid"], p["rss_start_mib"], p["rss_end_mib"], p["rss_max_mib"],
                p["rss_growth_pct"], p["fds_start"], p["fds_end"], p["fds_max"],
            ]
            for p in m["processes"]
        ],
    )
    if m["gone_after_warmup"] or m["started_after_warmup"]:
        md += [
            "",
            "Gone after warm-up: "
            + (", ".join(f"{g['role']} {g['pid']}" for g in m["gone_after_warmup"]) or "none")
            + ". Started after warm-up: "
            + (", ".join(f"{g['role']} {g['pid']}" for g in m["started_after_warmup"]) or "none")
            + ".",
        ]
    return md


def write_samples(samples: list[soak_probe.Sample], path: Path) -> None:
    """Every sample as CSV rows ``t_s,pid,role,rss_mib,fds``: the trend behind the table."""
    rows = ["t_s,pid,role,rss_mib,fds"]
    rows += [f"{s.t:.1f},{pid},{role},{rss / 2**20:.1f},{fds}"
             for s in samples for pid, (role, rss, fds) in sorted(s.procs.items())]
    path.write_text("\n".join(rows) + "\n")


def write(summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    md = _markdown(summary)
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'summary.json'} and {out / 'summary.md'}")
