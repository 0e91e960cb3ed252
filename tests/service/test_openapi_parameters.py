"""The OpenAPI parameters say what the server accepts: a header or query value is text, never
JSON null, so no parameter schema admits null (Schemathesis sent ``X-Kronos-Timeout-S: null``,
which the schema allowed and the server refused with 422: "schema-valid request rejected")."""

from __future__ import annotations

import json

from service.app import api


def _parameters():
    for path, ops in api.openapi()["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                yield f"{method.upper()} {path} {p['in']} {p['name']}", p["schema"]


def test_no_parameter_schema_admits_null():
    nullable = [name for name, schema in _parameters() if '"null"' in json.dumps(schema)]
    assert nullable == []


def test_the_deadline_header_is_a_number_in_its_range():
    schema = dict(_parameters())["POST /v1/forecast header x-kronos-timeout-s"]
    assert (schema["type"], schema["minimum"], schema["maximum"]) == ("number", 1, 86_400)
