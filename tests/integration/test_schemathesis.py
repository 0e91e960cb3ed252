"""Schemathesis against the live default service, every check on (``--checks all``): no 5xx,
every status documented, responses matching their schema, schema-invalid requests rejected
and schema-valid requests accepted. Positive and negative examples for every operation,
a bounded number of each so that the integration session stays short.

JSON Schema cannot state four rules the gateway enforces on inline series: timestamps
strictly increasing, within 1677-2262 (datetime64[ns]), values within float32, and, in a row
without an amount, volume × mean price within float32 too (the amount the gateway derives). A series
breaking them is an ``invalid_series`` entry in ``errors``, also when no series is usable (a
200 with no forecasts; tests/integration/test_hostile_http.py covers those). Positive examples here
are made to follow the rules (``_follow_runtime_rules``), as the Schemathesis docs advise for rules
a schema cannot express; everything else is generated as is.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

pytestmark = pytest.mark.integration

EXAMPLES = {"positive": 25, "negative": 25}  # per operation and mode
# Positive examples ask for at most this much work. Sample paths and horizon change how much the
# replicas compute, not which fields the request and the response carry: single generated cases
# (16 series x 100 paths x 122 steps; 12 series x 495 steps, past the bundled model's 256-candle
# context) cost 24-90 s each. Large requests are tested for what they are elsewhere
# (tests/integration/test_service_http.py, test_limits_http.py, tests/service/test_limits.py).
MAX_POSITIVE_WORK = {"sample_count": 4, "horizon": 48}


def _is_datetime(value) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def _follow_runtime_rules(body):
    """Inline candle rows of a positive example: increasing in-range timestamps, values whose
    derived amount fits float32; and at most ``MAX_POSITIVE_WORK``."""
    if not isinstance(body, dict):
        return body
    for field, most in MAX_POSITIVE_WORK.items():
        value = body.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > most:
            body[field] = most
    if not isinstance(body.get("series"), list):
        return body
    start = datetime(2024, 1, 1)
    for s in body["series"]:
        rows = s.get("candles") if isinstance(s, dict) else None
        if not isinstance(rows, list):
            continue
        for i, row in enumerate(rows):
            if isinstance(row, list) and row and _is_datetime(row[0]):
                row[0] = (start + timedelta(hours=i)).isoformat() + "Z"  # RFC 3339: with an offset
                # |v| <= 1e15: within float32, and so is a derived amount (volume x price <= 1e30)
                row[1:] = [
                    max(-1e15, min(1e15, v)) if isinstance(v, float) and math.isfinite(v) else v
                    for v in row[1:]
                ]
    return body


@pytest.fixture(scope="module")
def api_schema(live_service):
    import schemathesis

    schema = schemathesis.openapi.from_url(f"{live_service.url}/openapi.json")
    return schema


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_schemathesis_all_checks(live_service, api_schema, mode):
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import max_response_time

    # a bounded deadline per request: a generated 1,000-series, 100-sample forecast may not hog the
    # replicas
    headers = {"X-Kronos-Timeout-S": "120"}
    failures: list[str] = []
    ran = 0
    for result in api_schema.get_all_operations():
        op = result.ok()
        strategy = op.as_strategy(generation_mode=GenerationMode(mode))

        @given(case=strategy)
        @settings(max_examples=EXAMPLES[mode], deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            nonlocal ran
            if case.headers is None:
                case.headers = {}
            if mode == "positive":
                case.body = _follow_runtime_rules(case.body)
                # any deadline in the schema's range is valid; the test picks one the work fits in
                for name in [h for h in case.headers if h.lower() == "x-kronos-timeout-s"]:
                    del case.headers[name]
                case.headers["X-Kronos-Timeout-S"] = headers["X-Kronos-Timeout-S"]
            else:
                case.headers.setdefault("X-Kronos-Timeout-S", headers["X-Kronos-Timeout-S"])
            ran += 1
            try:
                # functional checks only: how long an answer takes is the benchmarks' business
                case.call_and_validate(base_url=live_service.url, timeout=120,
                                       excluded_checks=[max_response_time])
            except Exception as exc:  # collect every operation's failures, then report them all
                failures.append(f"{case.operation.label}: {type(exc).__name__}: {str(exc)[:600]}")

        try:
            run()
        # no negative example exists (an operation without parameters or body)
        except Unsatisfiable:
            assert mode == "negative", op.label
    assert ran >= 2 * EXAMPLES[mode], ran
    assert not failures, "\n\n".join(failures[:10])
    # and the service is still healthy after the storm
    assert live_service.client.get("/readyz").status_code == 200


# ``--checks all`` includes the response-time check (``max_response_time``, ST112), with a 10 s
# limit when none is given, and ``--exclude-checks`` does not offer it (4.32). A busy machine once
# failed it (a 17.7 s answer on a loaded CI run): a functional test must not fail because the
# machine is busy, and timing belongs in the benchmarks (kronos bench, loadtests/). So its limit is
# the request timeout: an answer slower than that fails as a timeout, nothing faster fails at all.
REQUEST_TIMEOUT_S = 150


def test_schemathesis_cli_coverage_phase_all_checks(live_service, tmp_path):
    """``st run --checks all`` as a user runs it, for the phase the strategies above do not
    reach (coverage: boundary and null values of every field and parameter, where
    ``X-Kronos-Timeout-S: null`` once slipped through a nullable header schema, and a
    ``"repair": 0`` was read as false). Left out: an unknown extra header
    (``allow-extra-parameters = false``): an HTTP API ignores headers it does not know, which is
    no violation; and the response-time check (``max_response_time``, ST112): a functional test
    must not fail because the machine is busy (issue 52)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    st = shutil.which("st") or str(Path(sys.executable).with_name("st"))
    config = tmp_path / "schemathesis.toml"
    config.write_text("[generation]\nallow-extra-parameters = false\n")
    run = subprocess.run(
        [
            st, "--config-file", str(config), "run", f"{live_service.url}/openapi.json", "--checks",
            "all", "--max-response-time", str(REQUEST_TIMEOUT_S),
            "--phases", "coverage", "--generation-deterministic",
            "--request-timeout", str(REQUEST_TIMEOUT_S),
            "--no-color",
            # a deadline the work fits in, as above: the phase's smallest one (1 s) races a
            # calendar's first build (``exchange``: XKRX takes seconds) and earns a 504, right for
            # that deadline but a "server error" to Schemathesis; the header's own schema is checked
            # by tests/service/test_openapi_parameters.py
            "-H", "X-Kronos-Timeout-S: 120",
        ],
        # its .schemathesis/ cache goes there
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout or "passed" in run.stdout, run.stdout[-3000:]
    assert live_service.client.get("/readyz").status_code == 200
