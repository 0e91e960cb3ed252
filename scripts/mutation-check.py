#!/usr/bin/env python3
"""Planted-change check: every change below once slipped past the test suite (issue 9). Each is
applied to a scratch copy of the working tree, the tests that should notice it run there, and
the change must make them fail ("caught").

    python scripts/mutation-check.py                 # unit-test lines (a few minutes)
    python scripts/mutation-check.py --integration   # also the lines only real Ray/HTTP can catch
    python scripts/mutation-check.py --only-integration  # just those (Ray starts once per plant)
    python scripts/mutation-check.py --list          # show the planted changes

Exit status 1 when a change is missed, or when its code no longer matches (stale line: update
the plant to the new code). The repository itself is never modified.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plant:
    name: str  # what the change breaks
    path: str  # file, relative to the repository
    old: str  # exact text replaced (must occur exactly once)
    new: str
    tests: tuple[str, ...]  # pytest selections that must fail
    integration: bool = False  # needs Ray + HTTP (tests/integration): several minutes


SVC = "tests/service"
FID = "tests/eval/test_fidelity.py"
GP = "tests/eval/test_garch_paired.py"
HOLD = "tests/train/test_corpus_holdout.py"
STV = "tests/data/test_store_versions.py"
PLANTS: list[Plant] = [
    Plant(
        "bug 1: CPU out-of-memory (RuntimeError) not split, only torch.OutOfMemoryError",
        "service/replica/step_runner.py", "oom = is_out_of_memory(exc)",
        "oom = isinstance(exc, __import__('torch').OutOfMemoryError)",
        (f"{SVC}/replica/test_step_runner.py",),
    ),
    Plant(
        "OOM split retries every error (shape bugs too)", "service/replica/step_runner.py",
        "oom = is_out_of_memory(exc)", "oom = True", (f"{SVC}/replica/test_scheduler_runner.py",),
    ),
    Plant(
        "bug 2: Arrow quantile columns named with :g (0.1234567 == 0.1234568)",
        "service/gateway/encode.py", 'cols[f"{name}_q{quantile_label(lv)}"]',
        'cols[f"{name}_q{lv:g}"]', (f"{SVC}/gateway",),
    ),
    Plant(
        "bug 3: unknown settings keys silently ignored", "service/common/settings.py",
        'SettingsConfigDict(env_prefix="KRONOS_", extra="forbid")',
        'SettingsConfigDict(env_prefix="KRONOS_", extra="ignore")',
        (f"{SVC}/test_metrics_settings.py::test_unknown_settings_keys_are_refused",),
    ),
    Plant(
        "client gone: the ingress no longer cancels the Ray call of a pending shard",
        "service/serve_replicas.py",
        "resp.cancel()  # client gone",
        "pass  # client gone",
        (f"{SVC}/test_app.py",),
    ),
    Plant(
        "a failing shard no longer cancels the request's other shards",
        "service/gateway/dispatch.py", "            for t in tasks:\n                t.cancel()\n",
        "            for t in tasks:\n                pass\n", (f"{SVC}/gateway",),
    ),
    Plant(
        "memory model bypassed: memory_model_fit says 10**9 series fit",
        "service/gateway/shards.py",
        "    def fit(lookback: int) -> int:\n        if lookback not in cache:",
        "    def fit(lookback: int) -> int:\n        return 10**9\n        if lookback not in "
        "cache:",
        (f"{SVC}/gateway",),
    ),
    Plant(
        "Arrow output swaps the open and low columns", "service/gateway/encode.py",
        "cols[name] = pa.array(np.ascontiguousarray(mean[:, k]), pa.float32())",
        "cols[name] = pa.array(np.ascontiguousarray(mean[:, {0: 2, 2: 0}.get(k, k)]), "
        "pa.float32())",
        (f"{SVC}/gateway",),
    ),
    Plant(
        "session clock forced off in the gateway (EURUSD on UTC sessions)",
        "service/gateway/prepare.py",
        'session = (meta.get("timezone"), meta["session_timezone"]) if '
        'meta.get("session_timezone") else None',
        "session = None", (f"{SVC}/gateway",),
    ),
    Plant(
        "full replica queue (BackPressureError) not translated to 503", "service/serve_replicas.py",
        "except BackPressureError as exc:", "except ZeroDivisionError as exc:",
        (f"{SVC}/test_app.py",),
    ),
    Plant(
        "dead replica (RayActorError) not translated to a retry", "service/serve_replicas.py",
        "except RayActorError as exc:\n            first_line",
        "except ZeroDivisionError as exc:\n            first_line", (f"{SVC}/test_app.py",),
    ),
    Plant(
        "503 without Retry-After", "service/common/errors.py",
        '{"Retry-After": str(self.retry_after_s)}', "{}", (f"{SVC}/test_app.py",),
    ),
    Plant(
        "load test counts shed requests (503) as answered", "loadtests/locustfile.py",
        'outcomes["shed"] += 1\n                r.failure(',
        'outcomes["ok"] += 1\n                r.success() or (', ("tests/loadtests/test_run.py",),
    ),
    Plant(
        "gateway records each batch report twice", "service/gateway/dispatch.py",
        "for rep in res.reports:\n                        self.metrics.record_batch(rep)",
        "for rep in res.reports + res.reports:\n                        "
        "self.metrics.record_batch(rep)",
        (f"{SVC}/gateway",),
    ),
    Plant(
        "client gone: the gateway keeps running the request's shards (shielded)",
        "service/gateway/dispatch.py",
        "        try:\n            return list(await asyncio.gather(*tasks))\n        except "
        "BaseException:",
        "        try:\n            return list(await "
        "asyncio.shield(asyncio.gather(*tasks)))\n        except ZeroDivisionError:",
        (f"{SVC}/gateway",),
    ),
    # the faults an audit planted that once passed the suite (issue 41)
    Plant(
        "fidelity: the one-step move taken as the mean absolute level",
        "kronos_core/eval/fidelity.py", "move = float(np.abs(np.diff(x, axis=1)).mean())",
        "move = float(np.abs(x).mean())",
        (f"{FID}::test_the_move_is_the_one_step_change_not_the_level",),
    ),
    Plant(
        "Diebold-Mariano without its HAC variance", "kronos_core/eval/paired.py",
        "var = hac_variance(d, lags)", "var = hac_variance(d, 0)",
        (f"{GP}::test_dm_uses_the_hac_variance_on_autocorrelated_differences",),
    ),
    Plant(
        "GARCH: a window's variance read one row past its origin", "kronos_core/eval/garch.py",
        "var_next = var[rows - 1]", "var_next = var[rows]",
        (f"{GP}::test_a_window_reads_no_row_at_or_past_its_origin",),
    ),
    Plant(
        "GARCH: a window's last close read one row past its origin", "kronos_core/eval/garch.py",
        "last = np.asarray(closes[k], dtype=np.float64)[rows - 1]",
        "last = np.asarray(closes[k], dtype=np.float64)[rows]",
        (f"{GP}::test_a_window_reads_no_row_at_or_past_its_origin",),
    ),
    Plant(
        "training loads every split (the split filter broken alone)", "kronos_core/train/data.py",
        "flt = CorpusFilter(split=TRAIN,", "flt = CorpusFilter(split=None,",
        (f"{HOLD}::test_the_split_filter_alone_keeps_the_hold_out_instruments_out",),
    ),
    Plant(
        "the training mask allows hold-out instruments (the mask broken alone)",
        "kronos_core/data/corpus.py", 'if info["split"] == HOLDOUT_INSTRUMENT:', "if False:",
        (f"{HOLD}::test_the_mask_alone_keeps_out_hold_out_instruments_and_evaluation_rows",),
    ),
    Plant(
        "store gc: an older generation the manifest still names taken for garbage",
        "kronos_core/data/housekeeping.py", "if named.get(symbol) == gen:",
        "if gen == m.version:",
        (f"{STV}::test_gc_after_a_partial_import_keeps_the_older_files_the_manifest_still_names",),
    ),
    Plant(
        "store verify: a file the manifest names but that was deleted passes",
        "kronos_core/data/housekeeping.py",
        'report.problems.append(f"{path}: missing (version {report.version} names it)")',
        "pass",
        (f"{STV}::test_verify_reports_a_deleted_file_and_a_nan",),
    ),
    Plant(
        "store verify: a file holding a NaN passes", "kronos_core/data/housekeeping.py",
        "        if bad:\n            report.problems.append(f\"{path}: NaN",
        "        if False:\n            report.problems.append(f\"{path}: NaN",
        (f"{STV}::test_verify_reports_a_deleted_file_and_a_nan",),
    ),
    Plant(
        "import: a non-positive open alone is let in (and --fix-high-low spreads it to low)",
        "kronos_core/data/validate.py",
        "    for col in PRICE_COLUMNS:", "    for col in PRICE_COLUMNS[1:]:",
        ("tests/data/test_import_summary.py::"
         "test_an_open_alone_below_zero_is_refused_even_with_fix_high_low",),
    ),
    Plant(
        "store lock shared: two imports at once both build on one version (one is lost)",
        "kronos_core/data/versions.py", "fcntl.flock(self.fd, fcntl.LOCK_EX)",
        "fcntl.flock(self.fd, fcntl.LOCK_SH)",
        (f"{STV}::test_two_imports_at_the_same_moment_both_land",),
    ),
    Plant(
        "a killed import's unpublished files left beside the next import's version",
        "kronos_core/data/store_txn.py",
        "removed = remove_unpublished(self.store.root, self.base)", "removed = []",
        (f"{STV}::test_a_killed_imports_files_are_gone_after_the_next_import_of_a_few_symbols",),
    ),
    Plant(
        "client gone over HTTP: the replicas keep running the request (shielded gateway)",
        "service/gateway/dispatch.py",
        "        try:\n            return list(await asyncio.gather(*tasks))\n        except "
        "BaseException:",
        "        try:\n            return list(await "
        "asyncio.shield(asyncio.gather(*tasks)))\n        except ZeroDivisionError:",
        (
            "tests/integration/test_service_http.py::test_client_disconnect_stops_the_replicas_working_for_it",
        ),
        integration=True,
    ),
    Plant(
        "replica hands its batch reports over twice (tokens counted twice)",
        "service/replica/deployment.py", "res.reports, self._reports = self._reports, []",
        "res.reports = list(self._reports)",
        ("tests/integration/test_prometheus.py::test_prometheus_scrapes_service_metrics",),
        integration=True,
    ),
    Plant(
        "Arrow over HTTP swaps the open and low columns", "service/gateway/encode.py",
        "cols[name] = pa.array(np.ascontiguousarray(mean[:, k]), pa.float32())",
        "cols[name] = pa.array(np.ascontiguousarray(mean[:, {0: 2, 2: 0}.get(k, k)]), "
        "pa.float32())",
        ("tests/integration/test_service_http.py::test_arrow_stream_matches_json",),
        integration=True,
    ),
    Plant(
        "session clock forced off, seen over HTTP with the sample store's EURUSD",
        "service/gateway/prepare.py",
        'session = (meta.get("timezone"), meta["session_timezone"]) if '
        'meta.get("session_timezone") else None',
        "session = None",
        (
            "tests/integration/test_service_http.py::test_fx_future_timestamps_follow_the_new_york_session",
        ),
        integration=True,
    ),
    # issue 54: the evaluation's yardsticks
    Plant(
        "issue 54: sampled forecasts scored with the plug-in CRPS instead of the fair one",
        "kronos_core/eval/metrics.py", 'form = "pwm" if estimator == FAIR else "qd"',
        'form = "qd"', ("tests/eval/test_metrics.py",),
    ),
    Plant(
        "issue 54: the look-ahead guard never refuses a factor",
        "kronos_core/eval/cross_section.py",
        "        if not same.all():", "        if False:", ("tests/eval/test_cross_section.py",),
    ),
    Plant(
        "issue 54: RankIC computed on the values (Pearson), not their ranks",
        "kronos_core/eval/cross_section.py", "rank_ic[j] = _corr(_ranks(s), _ranks(r))",
        "rank_ic[j] = _corr(s, r)", ("tests/eval/test_cross_section.py",),
    ),
    Plant(
        "issue 54: top-minus-bottom spread taken against the second quantile",
        "kronos_core/eval/cross_section.py", "spread = per_date[:, -1] - per_date[:, 0]",
        "spread = per_date[:, -1] - per_date[:, 1]", ("tests/eval/test_cross_section.py",),
    ),
    Plant(
        "issue 54: the top-k portfolio pays no costs", "kronos_core/eval/cross_section.py",
        "port = bt.simulate(prices, trade_rows, weights, cost_bps)",
        "port = bt.simulate(prices, trade_rows, weights, 0.0)",
        ("tests/eval/test_cross_section.py",),
    ),
    Plant(
        "issue 54: forecast move size taken as the spread, not the mean |return|",
        "kronos_core/eval/volatility.py", "forecast = np.abs(path_ret).mean(axis=1)",
        "forecast = path_ret.std(axis=1)", ("tests/eval/test_volatility.py",),
    ),
    # issue 52: plants that once slipped past the suite, each with its test now
    Plant(
        "admission: Retry-After of a refusal not read from the settings", "service/state.py",
        "settings.retry_after_s, on_refuse=", "1, on_refuse=",
        (f"{SVC}/test_state.py::test_start_reads_the_admission_settings_into_the_gate",),
    ),
    Plant(
        "admission: queue bound not read from the settings", "service/state.py",
        "settings.inflight_limit, settings.max_queued_requests, settings.queue_wait_s,",
        "settings.inflight_limit, 32, settings.queue_wait_s,",
        (f"{SVC}/test_state.py::test_start_reads_the_admission_settings_into_the_gate",),
    ),
    Plant(
        "admission: queue wait bound not read from the settings", "service/state.py",
        "settings.inflight_limit, settings.max_queued_requests, settings.queue_wait_s,",
        "settings.inflight_limit, settings.max_queued_requests, 2.0,",
        (f"{SVC}/test_state.py::test_start_reads_the_admission_settings_into_the_gate",),
    ),
    Plant(
        "admission: the time queued not left for the route", "service/admission.py",
        'scope.setdefault("state", {})["queued_s"] = time.monotonic() - t0',
        'scope.setdefault("state", {})["queued_s"] = 0.0',
        (f"{SVC}/test_admission.py::test_the_time_a_request_waited_for_a_slot_is_left_for_its_"
         "deadline",),
    ),
    Plant(
        "the time queued not taken off the request's deadline", "service/app.py",
        'timeout = max(0.001, timeout - scope_state.get("queued_s", 0.0))',
        "timeout = max(0.001, timeout)",
        (f"{SVC}/test_app.py::test_the_time_queued_is_taken_off_the_requests_deadline",),
    ),
    Plant(
        "a key past its rate is not refused 429", "service/app.py", "        if wait > 0:\n",
        "        if False:\n",
        (f"{SVC}/test_app.py::test_a_key_past_its_rate_is_429_with_retry_after",),
    ),
    Plant(
        "a key's changed rate ignored at a keys-file reload (the old bucket kept)",
        "service/auth.py", "if before is not None and before.rate == bucket.rate:",
        "if before is not None:",
        (f"{SVC}/test_auth.py::test_a_keys_changed_rate_takes_effect_at_the_reload",),
    ),
    Plant(
        "ledger backup copies without the scorers' lock", "kronos_core/ledger/backup.py",
        "with SymbolLock(root, LOCK_NAME):  # no scoring pass", "if True:  # no scoring pass",
        ("tests/ledger/test_ledger_backup.py::test_a_backup_of_a_live_ledger_round_trips",),
    ),
    Plant(
        "stale: a symbol behind the portfolio not said (issue 52)", "service/gateway/stale.py",
        "if missed >= at_least:", "if missed > MAX_COUNT:",
        (f"{SVC}/gateway/test_stale.py",),
    ),
    Plant(
        "history_cut again for the model's default window (issue 52)",
        "kronos_core/base/lookback.py",
        'if lookback.source != "request" or used >= lookback.value:',
        'if used >= (lookback.value if lookback.source == "request" else held):',
        (f"{SVC}/gateway/test_history.py", "tests/base/test_lookback.py"),
    ),
]


def _scratch_copy(dest: Path) -> None:
    """Tracked and untracked (not ignored) files of the working tree, as they are now."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _run_tests(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [
        sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0", "-m",
        "slow or not slow", *tests,
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, "timed out"
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, tail


def _verdict(code: int, tail: str) -> str:
    """CAUGHT only when a test failed; a run that errored (a fixture that could not start Ray, a
    timeout, nothing collected) proves nothing about the plant and reports ERROR."""
    if code == 0:
        return "MISSED"
    if code == 1 and " failed" in tail:
        return "CAUGHT"
    return "ERROR"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--integration", action="store_true",
        help="also run the plants only integration tests catch",
    )
    p.add_argument("--list", action="store_true", help="list the planted changes and exit")
    p.add_argument(
        "--only-integration", action="store_true",
        help="just the plants only integration tests catch",
    )
    p.add_argument("-k", default="", help="only plants whose name contains this text")
    p.add_argument("--timeout", type=float, default=900, help="seconds per plant's test run")
    args = p.parse_args(argv)
    wanted = (
        (lambda x: x.integration)
        if args.only_integration
        else (lambda x: args.integration or not x.integration)
    )
    plants = [x for x in PLANTS if wanted(x) and args.k.lower() in x.name.lower()]
    if args.list:
        for x in plants:
            print(f"{x.path}: {x.name}  ->  {' '.join(x.tests)}")
        return 0
    results: list[tuple[str, Plant, str]] = []
    with tempfile.TemporaryDirectory(prefix="kronos-mutation-") as tmp:
        root = Path(tmp)
        _scratch_copy(root)
        for x in tqdm(plants, desc="planted changes", unit="plant"):
            target = root / x.path
            original = target.read_text()
            if original.count(x.old) != 1:
                results.append(("STALE", x, f"text to replace found {original.count(x.old)} times"))
                continue
            target.write_text(original.replace(x.old, x.new))
            t0 = time.monotonic()
            try:
                code, tail = _run_tests(root, x.tests, args.timeout)
            finally:
                target.write_text(original)
            verdict = _verdict(code, tail)
            results.append((verdict, x, f"{tail} ({time.monotonic() - t0:.0f} s)"))
    width = max(len(x.name) for _, x, _ in results) if results else 0
    for verdict, x, detail in results:
        print(f"{verdict:7} {x.name:<{width}}  [{x.path}]  {detail}")
    bad = [r for r in results if r[0] != "CAUGHT"]
    print(f"\n{len(results) - len(bad)}/{len(results)} planted changes caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
