"""Turning pydantic validation errors into placed findings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

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
    import typing

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


def _clean_loc(loc: tuple) -> tuple:
    # pydantic adds union branch names ("dict[str,any]", "bool") and the like; keep data keys only
    out = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in ("bool", "function-after")):
            continue
        out.append(part)
    return tuple(out)


def report_model_errors(exc: ValidationError, model: type[BaseModel], col: Collector) -> None:
    """Add one finding per pydantic error; unknown keys get a 'did you mean'."""
    seen: set[tuple] = set()
    for err in exc.errors(include_url=False):
        loc = _clean_loc(tuple(err["loc"]))
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            owner = _owner(model, loc[:-1])
            allowed = sorted(owner.model_fields) if owner else []
            near = did_you_mean(key, allowed)
            hint = f"did you mean '{near}'?" if near else (
                f"allowed keys: {', '.join(allowed)}" if allowed else "remove it"
            )
            col.add("TL201", f"unknown key '{key}'", loc, hint, at_key=True)
        elif kind == "missing":
            parent = loc[:-1]
            if (parent, "missing") in seen:
                pass
            col.add("TL202", f"required key '{loc[-1]}' is missing", parent, f"add '{loc[-1]}:'", at_key=True)
        elif kind == "literal_error" and loc and loc[-1] == "version":
            col.add("TL204", f"version must be 1, found {err.get('input')!r}", loc, "write 'version: 1'")
        else:
            if (loc, "type") in seen:
                continue  # one message per place is enough (unions report each branch)
            seen.add((loc, "type"))
            msg = err["msg"]
            found = err.get("input")
            if not isinstance(found, (dict, list)):
                msg = f"{msg} (found {found!r})"
            col.add("TL203", msg, loc, _type_hint(err))


def _type_hint(err: dict) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind.startswith("greater_than") or kind.startswith("less_than"):
        return "use a number in range"
    if kind == "literal_error":
        return f"expected {ctx.get('expected', 'one of the listed values')}"
    if kind in ("string_type",):
        return "quote the value or write text"
    if kind in ("int_type", "float_type"):
        return "write a number"
    if kind in ("bool_type",):
        return "write true or false"
    if kind in ("list_type",):
        return "write a list, e.g. [a, b]"
    if kind in ("dict_type", "model_type"):
        return "write a mapping (key: value)"
    return ""
