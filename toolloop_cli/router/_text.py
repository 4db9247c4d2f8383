"""Small text helpers shared by the router: excerpts, bounds, data escaping, strict JSON."""

from __future__ import annotations

import json
import re
from typing import Any

from .._json import MAX_VALUE_DEPTH, value_problem

EXCERPT_CHARS = 80
_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```\s*\Z", re.DOTALL)
# controls, line separators and lone surrogates (not text at all: no JSON writer takes them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most ``limit`` characters of ``text``, control characters escaped, quoted."""
    short = text[:limit]
    shown = _CONTROL.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), short)
    return "'" + shown + ("…'" if len(text) > limit else "'")


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (deterministic)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters not shown]"


def to_json(value: Any) -> str:
    """Deterministic, compact JSON for showing a value to a model (keys sorted, Unicode kept)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=_fallback)


def _fallback(value: Any) -> str:
    return f"<{type(value).__name__}>"


def as_data(text: str) -> str:
    """Text made safe to place between data delimiters: ``<`` and ``>`` become JSON escapes, so
    nothing inside a data block can close it or open another block."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: how deeply a reply's object may nest: the values in it (a call's arguments, the answer's
#: fields) as deeply as any call's arguments may, one level below the object itself
MAX_REPLY_DEPTH = MAX_VALUE_DEPTH + 1
_SPECIAL = re.compile(r'[\[\]{}"\\]')


def _nesting(body: str, limit: int) -> int:
    """How deeply the brackets of ``body`` nest (brackets inside strings aside), counted up to
    just past ``limit``: one pass over the brackets, quotes and backslashes, no recursion and no
    backtracking, so a reply of a million brackets is measured, not parsed."""
    depth = deepest = 0
    in_string = False
    escaped = -1  # the position a backslash in a string escapes
    for m in _SPECIAL.finditer(body):
        at, c = m.start(), m.group()
        if at == escaped:
            continue
        if in_string:
            if c == "\\":
                escaped = at + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif c in "]}":
            depth -= 1
    return deepest


def one_object(text: str, what: str) -> dict[str, Any] | str:
    """The single JSON object a reply holds (a Markdown code fence around it is accepted), or
    why there is none, written for the model to act on. ``what`` names the expected object.

    Whatever the model wrote, what comes back can be hashed, journaled, checked against a schema
    and shown in the next prompt: an object nesting deeper than ``MAX_REPLY_DEPTH``, a number
    past a double, or text with a lone surrogate is refused here, never met later."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    if not body:
        return f"the reply is empty; reply with exactly one JSON object ({what})"
    if body.startswith("```") and not fenced:
        return f"the reply has text outside its code fence; reply with the JSON object only ({what})"
    if not body.startswith("{"):
        try:
            other = json.loads(body)
        except ValueError:
            pass
        else:
            return f"the reply is {kind_of(other)}, not a JSON object; reply with exactly one JSON object ({what})"
        where = body.find("{")
        if where > 0:
            return (f"the reply has text before the JSON object ({excerpt(body[:where])}); "
                    f"reply with the JSON object only ({what})")
        return f"the reply is not a JSON object ({excerpt(body)}); reply with exactly one JSON object ({what})"
    if body.count("[") + body.count("{") > MAX_REPLY_DEPTH and _nesting(body, MAX_REPLY_DEPTH) > MAX_REPLY_DEPTH:
        return (f"the JSON object nests deeper than {MAX_REPLY_DEPTH} levels; "
                f"reply with one flatter JSON object ({what})")
    decoder = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    value: dict[str, Any]  # the body starts with "{": what decodes is an object
    try:
        value, end = decoder.raw_decode(body)
    except _Duplicate as exc:
        return f"the JSON object repeats the key {excerpt(str(exc))}; give each key once"
    except RecursionError:  # a deep stack already: the reply is refused, not the run
        return f"the JSON object nests too deeply to be read; reply with one flatter JSON object ({what})"
    except ValueError as exc:
        return f"the reply is not valid JSON ({exc}); reply with exactly one JSON object ({what})"
    rest = body[end:].strip()
    if rest:
        return (f"the reply has text after the JSON object ({excerpt(rest)}); "
                f"reply with one JSON object and nothing else ({what})")
    why = value_problem(value, MAX_REPLY_DEPTH)
    if why is not None:
        return f"the JSON object cannot be used: {why}; reply with one JSON object of plain text and numbers ({what})"
    return value


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}.get(
        type(value), type(value).__name__)
