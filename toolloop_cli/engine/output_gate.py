"""The output gate: what a call's result must be before a receipt holds it as ``ok``: JSON (no
silent conversion), within the run's output cap, valid against the tool's output schema, and
readable by its control envelope."""

from __future__ import annotations

from typing import Any

import orjson

from ..contract.compiled import ToolSpec
from ..contract.schemas import schema_errors


def check_output(tool: ToolSpec, value: Any, cap: int) -> tuple[dict | None, dict | None]:
    """``(error, envelope)``: the ``invalid_output`` error the result earns (None when it passes),
    and the envelope's readings of a result that passes."""
    size = _too_large(value, cap)
    if size is None:
        length, problem = _json_size(value)
        if problem is not None:
            return {"kind": "not_json", "message": f"result is not JSON: {problem}"}, None
        if length > cap:
            size = length
    if size is not None:
        return {"kind": "output_too_large",
                "message": f"result dropped: {size} bytes or more exceed the output cap of {cap} bytes"
                           " (--max-output-bytes)"}, None
    if tool.output_validator is not None and not tool.output_validator.is_valid(value):
        msgs = schema_errors(tool.output_validator, value, limit=3)
        return {"kind": "schema", "message": "result fails output_schema: " + "; ".join(msgs)}, None
    envelope = None
    if tool.envelope is not None:
        envelope, problem = tool.envelope.read(value)
        if problem is not None:
            return {"kind": "envelope", "message": problem}, None
    return None, envelope


def _too_large(value: Any, cap: int) -> int | None:
    """A lower bound of the JSON size of ``value`` when it already passes ``cap``, found without
    serialising: strings at the top level or one level down. Else None."""
    if isinstance(value, str):
        return len(value) + 2 if len(value) > cap else None
    if isinstance(value, (dict, list)):
        items = value.values() if isinstance(value, dict) else value
        n = 0
        for v in items:
            if isinstance(v, str):
                n += len(v)
                if n > cap:
                    return n
    return None


_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def _json_size(value: Any) -> tuple[int, str | None]:
    """The size of ``value`` as JSON, or why JSON cannot hold it: never a silent conversion (a
    date turned into text, NaN into null, an object of the App's own class into something)."""
    try:
        raw = orjson.dumps(value, option=_STRICT)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            return 0, f"{exc}"
        # integers of any size pass exactly (the standard library's encoder holds them)
        import json

        try:
            return len(json.dumps(value, allow_nan=False, separators=(",", ":"))), None
        except (TypeError, ValueError) as slow:
            return 0, f"{slow}"
    if b"null" in raw and value is not None and _non_finite(value):  # orjson writes NaN as null
        return 0, "NaN or infinity is not a JSON number"
    return len(raw), None


def _non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False
