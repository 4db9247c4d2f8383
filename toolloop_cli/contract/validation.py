"""Turning pydantic validation errors into placed findings."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from .._text import clip, excerpt, quoted
from .problems import Collector, did_you_mean


def _unwrap(tp: Any) -> Any:
    import typing

    origin = typing.get_origin(tp)
    if origin is typing.Union or str(origin) == "types.UnionType":
        for arg in typing.get_args(tp):
            if arg is not type(None):
                return _unwrap(arg)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return tp


def _element(tp: Any) -> Any:
    import typing

    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return _unwrap(typing.get_args(tp)[0])
    if origin is dict:
        return _unwrap(typing.get_args(tp)[1])
    return None


def _owner(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model whose fields are the keys of the mapping at ``loc``."""

    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            f = current.model_fields.get(part)
            if f is None:
                return None
            current = _unwrap(f.annotation)
            continue
        current = _element(current)
        if current is None:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


_MISSING = object()


def _clean_loc(loc: tuple, data: Any = _MISSING, missing_key: bool = False) -> tuple:
    """The data path of an error: pydantic adds union branch names ("dict[str,any]", "bool")
    that are not keys of the document. With the document at hand, a part is kept when it is
    a key or index of the data at that point, or when it is the key a "missing" error names."""
    if data is _MISSING:
        return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("bool", "function-after"))))
    out = []
    current: Any = data
    for i, part in enumerate(loc):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        elif isinstance(part, str) and not (missing_key and i == len(loc) - 1):
            continue  # a union branch name
        else:
            current = None
        out.append(part)
    return tuple(out)


def _found(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return quoted(value) if isinstance(value, str) else excerpt(value)


_EXPECTED = {
    "string_type": "text",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def report_model_errors(exc: ValidationError, model: type[BaseModel], col: Collector, data: Any = _MISSING) -> list[tuple]:
    """Add one finding per pydantic error; unknown keys and misspelled choices get a 'did you
    mean'. Returns the data path of every error (the parts of the document that are broken).

    Pass the validated ``data`` so that positions are exact whatever the keys are called.
    """
    seen: set[tuple] = set()
    broken: list[tuple] = []
    for err in exc.errors(include_url=False):
        kind = err["type"]
        loc = _clean_loc(tuple(err["loc"]), data, missing_key=kind == "missing")
        broken.append(loc)
        if kind == "extra_forbidden":
            key = str(loc[-1])
            owner = _owner(model, loc[:-1])
            allowed = sorted(owner.model_fields) if owner else []
            near = did_you_mean(key, allowed)
            hint = f"did you mean {quoted(near)}?" if near else (
                f"allowed keys: {', '.join(allowed)}" if allowed else "remove it"
            )
            col.add("TL201", f"unknown key {quoted(key)}", loc, hint, at_key=True)
        elif kind == "missing":
            col.add("TL202", f"required key {quoted(loc[-1])} is missing", loc[:-1], f"add '{loc[-1]}:'", at_key=True)
        elif kind == "literal_error" and loc and loc[-1] == "version" and len(loc) == 1:
            col.add("TL204", f"version must be 1, found {_found(err.get('input'))}", loc, "write 'version: 1'")
        else:
            if loc in seen:
                continue  # one message per place is enough (unions report each branch)
            seen.add(loc)
            message, hint = _type_message(err, model, loc, quoted_in_source=loc in col.smap.quoted)
            col.add("TL203", message, loc, hint)
    return broken


def _type_message(err: dict, model: type[BaseModel], loc: tuple, quoted_in_source: bool = False) -> tuple[str, str]:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    found = _found(err.get("input"))
    if loc and isinstance(loc[-1], int):
        where = f"item {loc[-1] + 1} of {quoted(loc[-2])}" if len(loc) > 1 else f"item {loc[-1] + 1}"
    else:
        where = f"{quoted(loc[-1])}" if loc else "the document"
    if kind in ("dict_type", "bool_type", "model_type") and loc and "schema" in str(loc[-1]):
        return (f"{where} must be a JSON Schema (a mapping, or true/false), found {found}",
                "write a mapping such as {type: object}, or {} for any value")
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        choices = re.findall(r"'([^']*)'", expected)
        near = did_you_mean(str(err.get("input")), choices) if isinstance(err.get("input"), str) else None
        return (f"{where} must be one of {expected}, found {found}",
                f"did you mean {quoted(near)}?" if near else f"write one of {expected}")
    if kind in _EXPECTED:
        return f"{where} must be {_EXPECTED[kind]}, found {found}", _type_hint(kind, quoted_in_source)
    if kind.startswith(("greater_than", "less_than")):
        return f"{where}: {err['msg'].replace('Input should be', 'must be')}, found {found}", "use a number in range"
    if kind == "too_short":
        return f"{where} must not be empty", "add at least one item"
    if kind == "too_long":
        return f"{where} has too many items", "remove items"
    msg = clip(err["msg"])
    if not isinstance(err.get("input"), (dict, list)):
        msg = f"{msg} (found {found})"
    return f"{where}: {msg}", ""


def _type_hint(kind: str, quoted_in_source: bool) -> str:
    """How to fix a value of the wrong type; quotes are named only where the file has them."""
    if kind == "string_type":
        return "quote the value or write text"
    if kind in ("int_type", "int_from_float", "float_type"):
        whole = kind != "float_type"
        if quoted_in_source:
            return "write the number without quotes"
        return "write a whole number, e.g. 30" if whole else "write a number, e.g. 30 or 1.5"
    if kind == "bool_type":
        return "write true or false"
    if kind == "list_type":
        return "write a list, e.g. [a, b]"
    return "write key: value pairs"
