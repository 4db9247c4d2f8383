"""Registries and plans read without pydantic when they are plainly well formed.

Importing pydantic and building the declaration models (``contract/models.py``,
``plan/models.py``) is about half of what a short command such as running a one-call plan costs
beyond the interpreter and trio. Most files are well formed, and their common parts are simple:
text, numbers, flags, choices, lists and mappings of them. Here such a document is checked
against the same declarations written as plain rules, and read into ``Decl`` objects that carry
the same fields, defaults and values as the models would.

Where a rule finds anything it does not plainly accept (a mistake, a value of a kind pydantic
would convert, a part these rules do not cover: MCP servers, sandboxes, control envelopes,
notifications, routed plans), it says nothing: the caller validates the document with the
models, which report every finding as they always have. So a finding, its message and its place
come only from the models; these rules only ever accept what the models accept, to the same
values (tests/test_quick_decl.py holds the two to that over every example file and their
variants, and the rules' fields and defaults to the models').
"""

from __future__ import annotations

import math
from typing import Any, Callable

#: the top-level keys of each mode of plan (the plan model's, for the checks that name them)
MODE_KEYS = {
    "sequential": {"calls"},
    "parallel": {"lanes", "max_concurrency"},
    "routed": {"goal", "context", "allowed_tools", "router_profile", "final_profile", "budget",
               "final_schema", "supervisor", "instructions", "inputs", "outcomes", "routes", "guardrails", "taint"},
}


class _No(Exception):
    """Not plainly acceptable: the models decide."""


Rule = Callable[[Any], tuple[Any, Any]]  # value -> (the field's value, its part of the dump)


class Decl:
    """A declaration read by these rules: each field an attribute (defaults filled in, as the
    model's), and ``model_dump(mode="json", exclude_unset=True)`` the fields the file set, as the
    model gives it (the contract's and the plan's hashes are taken of that)."""

    __slots__ = ("__dict__", "_set")

    def __init__(self, fields: dict[str, Any], given: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        object.__setattr__(self, "_set", given)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a declaration is frozen: {name!r} cannot be set")

    @property
    def model_fields_set(self) -> set[str]:
        """The fields the file set (the others have their defaults)."""
        return set(self._set)

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        if mode != "json" or not exclude_unset:
            raise TypeError("a declaration read without pydantic dumps only mode='json', exclude_unset=True")
        return _copy(self._set)

    def model_copy(self, *, update: dict[str, Any]) -> Decl:
        """A copy with ``update``'s fields set to its values, as they are (as the model's copy)."""
        return Decl({**self.__dict__, **update}, {**self._set, **update})

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied whole (its fields cannot be set one by one)
        return (Decl, (self.__dict__, self._set))

    def __repr__(self) -> str:
        return f"Decl({self.__dict__!r})"


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


# ---- the rules of a single value -------------------------------------------------------------

def _text(v: Any) -> tuple[Any, Any]:
    if type(v) is not str:
        raise _No
    return v, v


def _flag(v: Any) -> tuple[Any, Any]:
    if type(v) is not bool:
        raise _No
    return v, v


def _whole(ge: int | None = None, le: int | None = None) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        if type(v) is not int or (ge is not None and v < ge) or (le is not None and v > le):
            raise _No
        return v, v

    return rule


def _number(gt: float | None = None, ge: float | None = None) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        if type(v) not in (int, float):
            raise _No
        try:
            x = float(v)  # a whole number in a number's place is the number, as the model makes it
        except OverflowError:  # a whole number past any float: the model's own check says so
            raise _No from None
        if not math.isfinite(x) or (gt is not None and not x > gt) or (ge is not None and not x >= ge):
            raise _No
        return x, x

    return rule


def _one_of(*choices: Any) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        if not any(type(v) is type(c) and v == c for c in choices):
            raise _No
        return v, v

    return rule


def _optional(inner: Rule) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        return (None, None) if v is None else inner(v)

    return rule


def _list(inner: Rule, min_length: int = 0) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        if type(v) is not list or len(v) < min_length:
            raise _No
        pairs = [inner(x) for x in v]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    return rule


def _mapping(inner: Rule) -> Rule:
    def rule(v: Any) -> tuple[Any, Any]:
        if type(v) is not dict or any(type(k) is not str for k in v):
            raise _No
        pairs = {k: inner(x) for k, x in v.items()}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}

    return rule


def _json(v: Any) -> None:
    """Plain JSON data, which the models keep as it is and dump unchanged."""
    t = type(v)
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise _No
            _json(x)
    elif t is list:
        for x in v:
            _json(x)
    elif t is float:
        if not math.isfinite(v):
            raise _No
    elif not (v is None or t in (str, int, bool)):
        raise _No


def _any(v: Any) -> tuple[Any, Any]:
    _json(v)
    return v, v


def _any_mapping(v: Any) -> tuple[Any, Any]:
    if type(v) is not dict:
        raise _No
    _json(v)
    return v, v


def _schema(v: Any) -> tuple[Any, Any]:
    """A JSON Schema: a mapping, or true/false."""
    return _flag(v) if type(v) is bool else _any_mapping(v)


_ABSENT = object()


class Model:
    """The rules of one declaration: field -> (rule, default); a field whose default is
    ``_REQUIRED`` must be given; a field in ``model_only`` is one these rules leave to the model."""

    def __init__(self, fields: dict[str, tuple[Rule, Any]], model_only: tuple[str, ...] = ()) -> None:
        self.fields = fields
        self.model_only = frozenset(model_only)
        self.names = (*fields, *model_only)

    def __call__(self, v: Any) -> tuple[Any, Any]:
        if type(v) is not dict:
            raise _No
        values: dict[str, Any] = {}
        given: dict[str, Any] = {}
        for key in v:
            if key not in self.fields:
                raise _No  # unknown, or a part the model reads
        for name, (rule, default) in self.fields.items():
            raw = v.get(name, _ABSENT)
            if raw is _ABSENT:
                if default is _REQUIRED:
                    raise _No
                values[name] = default() if callable(default) else default
            else:
                values[name], given[name] = rule(raw)
        for name in self.model_only:
            values[name] = None
        return Decl(values, given), given


_REQUIRED = object()


def _fresh(value: Any) -> Callable[[], Any]:
    """A default that is a new list or mapping for each declaration, as pydantic copies it."""
    return lambda: _copy(value)


# ---- the registry (contract/models.py) -------------------------------------------------------

RETRY = Model({
    "max_attempts": (_whole(1, 100), 1),
    "backoff_s": (_number(ge=0), 0.0),
    "max_backoff_s": (_optional(_number(ge=0)), None),
    "on": (_list(_one_of("timeout", "error")), _fresh(["timeout", "error"])),
})
CONCURRENCY = Model({
    "max_in_flight": (_optional(_whole(1)), None),
    "per_second": (_optional(_number(gt=0)), None),
})
APPROVAL = Model({"when": (_text, _REQUIRED)})


def _approval(v: Any) -> tuple[Any, Any]:
    if v == "required" and type(v) is str:
        return v, v
    return APPROVAL(v)


TOOL = Model({
    "callable": (_optional(_text), None),
    "plan": (_optional(_text), None),
    "description": (_optional(_text), None),
    "input_schema": (_optional(_schema), None),
    "output_schema": (_optional(_schema), None),
    "cacheable": (_flag, False),
    "timeout_s": (_optional(_number(gt=0)), None),
    "retry": (_optional(RETRY), None),
    "isolation": (_one_of("thread", "process", "sandbox"), "thread"),
    "concurrency": (_optional(CONCURRENCY), None),
    "max_calls": (_optional(_whole(0)), None),
    "effect": (_one_of("read", "write", "destructive"), "read"),
    "idempotent": (_flag, False),
    "redact": (_list(_text), _fresh([])),
    "approval": (_optional(_approval), None),
    "dispatch": (_list(_text), _fresh([])),
    "output_trust": (_optional(_one_of("trusted", "untrusted")), None),
}, model_only=("mcp", "sandbox", "control_envelope"))
RUNNER_DEFAULTS = Model({
    "allowed_tools": (_optional(_list(_text)), None),
    "max_calls": (_optional(_whole(0)), None),
    "tool_timeout_s": (_optional(_number(gt=0)), None),
    "max_depth": (_optional(_whole(0)), None),
}, model_only=("notify",))
SUBAGENT = Model({
    "tools": (_mapping(TOOL), _REQUIRED),
    "runner_defaults": (RUNNER_DEFAULTS, lambda: RUNNER_DEFAULTS({})[0]),
})
REGISTRY = Model({
    "version": (_one_of(1), _REQUIRED),
    "app_root": (_optional(_text), None),
    "evidence": (_optional(_text), None),
    "subagents": (_mapping(SUBAGENT), _REQUIRED),
})

# ---- plans (plan/models.py): sequential and parallel ------------------------------------------

CALL = Model({
    "tool": (_text, _REQUIRED),
    "call_key": (_optional(_text), None),
    "args": (_optional(_any_mapping), None),
})
LANE = Model({
    "item_key": (_text, _REQUIRED),
    "calls": (_list(CALL, min_length=1), _REQUIRED),
    "payload": (_optional(_any_mapping), None),
})
PLAN = Model({
    "version": (_one_of(1), _REQUIRED),
    "registry": (_optional(_text), None),
    "subagent": (_text, _REQUIRED),
    "mode": (_one_of("sequential", "parallel"), _REQUIRED),
    "calls": (_optional(_list(CALL)), None),
    "max_concurrency": (_optional(_whole()), None),
    "lanes": (_optional(_list(LANE)), None),
}, model_only=tuple(sorted(set().union(*MODE_KEYS.values()) - {"calls", "lanes", "max_concurrency"})) + ("notify",))


def dumped(decl: Any) -> Any:
    """What ``decl.model_dump(mode="json", exclude_unset=True)`` gives, to be read only (a hash is
    taken of it): a declaration these rules read gives its data as it is, without the copy."""
    if isinstance(decl, Decl):
        return decl._set
    return decl.model_dump(mode="json", exclude_unset=True)


def read(model: Model, data: Any) -> Decl | None:
    """``data`` read by ``model``'s rules, or None where the declaration model must decide."""
    try:
        decl, _given = model(data)
    except _No:
        return None
    except RecursionError:
        return None
    return decl  # type: ignore[no-any-return]
