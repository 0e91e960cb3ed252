"""One enumeration of error codes end to end: the codes the code base can emit per symbol
are exactly the ones the response schema (and so OpenAPI) lists, codes are never written
as bare strings, and no branch reads an exception's wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kronos_core.base.errors import REQUEST_ERROR_CODES, SYMBOL_ERROR_CODES, ErrorCode, WarningCode
from kronos_core.data import store as store_mod
from service.common.schemas import SymbolErrorOut

REPO = Path(__file__).resolve().parents[2]
# modules that produce per-symbol errors: the gateway, the replica side, the store
EMITTERS = [REPO / "service", REPO / "kronos_core" / "data"]
SOURCES = [
    p for d in (REPO / "service", REPO / "kronos_core", REPO / "loadtests") for p in d.rglob("*.py")
]


def _used_members(paths) -> set[ErrorCode]:
    names = set()
    for d in paths:
        for p in d.rglob("*.py"):
            names |= set(re.findall(r"ErrorCode\.([A-Z_]+)", p.read_text()))
    return {ErrorCode[n] for n in names}


def _schema_codes(schema: dict) -> set[str]:
    return set(schema["properties"]["code"]["enum"])


def test_schema_lists_exactly_the_codes_that_can_be_emitted():
    emitted = _used_members(EMITTERS) - set(REQUEST_ERROR_CODES)
    listed = _schema_codes(SymbolErrorOut.model_json_schema())
    assert {c.value for c in emitted} == listed == {c.value for c in SYMBOL_ERROR_CODES}
    # every store error class carries a listed code
    store_codes = {cls.code for cls in store_mod.StoreError.__subclasses__()}
    assert store_codes == set(store_mod.ERROR_CODES) and {c.value for c in store_codes} <= listed


def test_openapi_lists_the_same_codes():
    pytest.importorskip("ray")
    from service.app import api

    schemas = api.openapi()["components"]["schemas"]
    assert _schema_codes(schemas["SymbolErrorOut"]) == {c.value for c in SYMBOL_ERROR_CODES}
    # a 422 keeps FastAPI's shape: deadline_unreachable's code sits beside its detail list
    unprocessable = {ErrorCode.INVALID_REQUEST, ErrorCode.DEADLINE_UNREACHABLE}
    body_codes = set(REQUEST_ERROR_CODES) - unprocessable
    assert set(schemas["RequestErrorOut"]["properties"]["code"]["enum"]) == {
        c.value for c in body_codes
    }
    code = schemas["UnprocessableOut"]["properties"]["code"]
    assert [s.get("const", s.get("enum")) for s in code["anyOf"] if s.get("type") != "null"] in (
        [ErrorCode.DEADLINE_UNREACHABLE.value], [[ErrorCode.DEADLINE_UNREACHABLE.value]])
    assert schemas["SymbolWarning"]["properties"]["code"] == {
        "$ref": "#/components/schemas/WarningCode"
    }
    assert set(schemas["WarningCode"]["enum"]) == {c.value for c in WarningCode}


def test_every_code_is_used_and_classified():
    assert set(SYMBOL_ERROR_CODES) | set(REQUEST_ERROR_CODES) == set(ErrorCode)
    assert not set(SYMBOL_ERROR_CODES) & set(REQUEST_ERROR_CODES)
    assert _used_members([REPO / "service", REPO / "kronos_core" / "data"]) == set(ErrorCode)


def test_codes_are_never_bare_strings_in_the_code_base():
    values = "|".join(c.value for c in [*ErrorCode, *WarningCode])
    pattern = re.compile(rf"""["']({values})["']""")
    offenders = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in SOURCES if p.name != "errors.py"
        for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)
    ]
    assert not offenders, "use kronos_core.base.errors.ErrorCode:\n" + "\n".join(offenders)


def test_no_branch_reads_an_exception_message():
    exc = (r"(?:str\((?:exc|err|error|ex|e)\)|\b(?:exc|err|error|ex|e)\.(?:message|args)"
           r"|\w+\.message|\w+\.error)")
    pattern = re.compile(
        rf"""["'][^"']*["']\s+(not\s+)?in\s+{exc}|{exc}\.(startswith|endswith)\("""
    )
    offenders = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in SOURCES
        for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)
    ]
    assert not offenders, "branch on an error code or exception type instead:\n" + "\n".join(
        offenders
    )
