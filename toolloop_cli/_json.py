"""JSON in and out for the whole package: orjson's speed, with integers of any size kept exact
and nesting bounded by a clear error instead of a crash.

orjson writes integers only within 64 bits, reads larger ones as (rounded) floats and stops at
255 levels of nesting. Such values are rare but legal, so ``dumps`` and ``loads`` take orjson's
path first and switch to an exact one only when it cannot be trusted. Values orjson can write
come out byte for byte as orjson writes them, whichever path is taken, so hashes never depend
on the path.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

#: How deeply ``dumps`` nests before it refuses (a cycle ends here too). orjson's own limit is
#: 255 levels; reading JSON is bounded by orjson's 1,024.
MAX_DEPTH = 10_000

_I64_MIN = -(1 << 63)
_U64_MAX = (1 << 64) - 1
# 19 digits in a row may be an integer orjson would read as a float (or refuse as infinite);
# ``[0-9]`` is what ``\d`` means in a bytes pattern, searched about twice as fast
_WIDE_NUMBER = re.compile(rb"[0-9]{19}")
#: every byte but the digits: a text with fewer than 19 digits in all has no 19 in a row, which
#: deleting the rest tells at a fraction of the search's cost (once a line of ``--lanes``)
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)


def wide_number(raw: bytes) -> bool:
    """Whether ``raw`` may hold an integer that orjson reads inexactly (as a float) or refuses."""
    return len(raw) >= 19 and len(raw.translate(None, _NOT_DIGITS)) >= 19 and _WIDE_NUMBER.search(raw) is not None


class JSONEncodeError(TypeError):
    """A value JSON cannot hold (an object of another type, a cycle, nesting past ``MAX_DEPTH``)."""


class JSONDecodeError(ValueError):
    """Text that is not one JSON document; the message says what and where, never the text."""


def dumps(value: Any, *, canonical: bool = False) -> bytes:
    """JSON bytes of ``value``: compact, UTF-8; with ``canonical``, keys sorted and non-text keys
    written as text (the form hashes and cache keys are taken of)."""
    option = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS if canonical else 0
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        pass  # a wide integer, deep nesting, or not JSON at all: the exact path tells which
    return _dumps_exact(value, option)


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of one JSON document, integers exact whatever their size.

    Raises ``JSONDecodeError`` for anything that is not JSON (NaN and infinities included) and
    for nesting deeper than 1,024 levels.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if _WIDE_NUMBER.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise JSONDecodeError(_reason(exc)) from None
    return _loads_exact(raw)


#: How deeply a call's arguments or a lane's payload may nest: far beyond any real arguments,
#: and low enough that every later step (schemas, redaction, the journal) stays off the stack.
MAX_VALUE_DEPTH = 100


def value_problem(value: Any, max_depth: int = MAX_VALUE_DEPTH) -> str | None:
    """Why ``value``, already read, still cannot be a call's arguments, a lane's payload or
    anything else a model wrote (it nests deeper than ``max_depth``, holds NaN or an infinity, or
    text with a lone surrogate, which no JSON writer, hash or schema validator takes), or None
    when it can. Bounded work: the walk stops at the first problem and never recurses."""
    if not value and type(value) is dict:  # arguments of a call that takes none
        return None
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and (item != item or item in (float("inf"), float("-inf"))):
            return f"it holds {item!r}, which is not a JSON number"
        if isinstance(item, str):
            if not _is_text(item):
                return _SURROGATE
        elif isinstance(item, (dict, list)):
            if depth >= max_depth:
                return f"it nests deeper than {max_depth} levels"
            if isinstance(item, dict):
                if not all(_is_text(k) for k in item if isinstance(k, str)):
                    return _SURROGATE
                stack.extend((sub, depth + 1) for sub in item.values())
            else:
                stack.extend((sub, depth + 1) for sub in item)
    return None


_SURROGATE = "it holds text with a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
_SURROGATES = re.compile("[\ud800-\udfff]")


def _is_text(text: str) -> bool:
    return _SURROGATES.search(text) is None


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "recursion" in text.lower() or "depth limit" in text.lower():
        return "the JSON nests deeper than 1,024 levels"
    return text


# ---------------------------------------------------------------------------------------------
# the exact paths


def _loads_exact(raw: bytes) -> Any:
    """Read with the standard library, which keeps integers exact, under orjson's rules: UTF-8
    only, no NaN or infinities, no lone surrogates, at most 1,024 levels."""
    import json

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONDecodeError(f"the text is not UTF-8 (byte {exc.start})") from None

    def constant(name: str) -> Any:
        raise JSONDecodeError(f"{name} is not a JSON number")

    def finite(literal: str) -> float:
        number = float(literal)
        if number in (float("inf"), float("-inf")):
            raise JSONDecodeError("a number is infinite when read as a double")
        return number

    try:
        value = json.loads(text, parse_constant=constant, parse_float=finite)
    except JSONDecodeError:
        raise
    except json.JSONDecodeError as exc:
        raise JSONDecodeError(f"{exc.msg}: line {exc.lineno} column {exc.colno} (char {exc.pos})") from None
    except RecursionError:
        raise JSONDecodeError("the JSON nests too deeply to be read") from None
    except ValueError:  # an integer of more than 4,300 digits
        raise JSONDecodeError("an integer has too many digits to be read") from None
    _check_read(value)
    return value


def _check_read(value: Any) -> None:
    """What orjson refuses and the standard library lets through: lone surrogates, and nesting
    past orjson's 1,024 levels (the two paths accept the same documents)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _utf8(item)
        elif isinstance(item, (dict, list)):
            if depth > 1024:
                raise JSONDecodeError("the JSON nests deeper than 1,024 levels")
            if isinstance(item, dict):
                for key, sub in item.items():
                    _utf8(key)
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in item)


def _utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JSONDecodeError("a string holds a lone surrogate (\\ud800-\\udfff)") from None


_END = object()


def _dumps_exact(value: Any, option: int) -> bytes:
    """Write ``value`` without recursion: containers walked here, every other value written by
    orjson itself (so the bytes match orjson's), integers outside 64 bits in full."""
    sort = bool(option & orjson.OPT_SORT_KEYS)
    text_keys = bool(option & orjson.OPT_NON_STR_KEYS)
    out: list[bytes] = []
    # each frame: [iterator over items, closing bracket, is a mapping, items written]
    stack: list[list[Any]] = []

    def start(item: Any) -> None:
        if isinstance(item, dict):
            if len(stack) >= MAX_DEPTH:
                raise JSONEncodeError(f"the value nests deeper than {MAX_DEPTH:,} levels (or refers to itself)")
            pairs = [(_key(k, text_keys), v) for k, v in item.items()]
            if sort:
                pairs.sort(key=lambda kv: kv[0])
            out.append(b"{")
            stack.append([iter(pairs), b"}", True, 0])
        elif isinstance(item, (list, tuple)):
            if len(stack) >= MAX_DEPTH:
                raise JSONEncodeError(f"the value nests deeper than {MAX_DEPTH:,} levels (or refers to itself)")
            out.append(b"[")
            stack.append([iter(item), b"]", False, 0])
        else:
            out.append(_scalar(item, option))

    start(value)
    while stack:
        frame = stack[-1]
        item = next(frame[0], _END)
        if item is _END:
            out.append(frame[1])
            stack.pop()
            continue
        if frame[3]:
            out.append(b",")
        frame[3] += 1
        if frame[2]:
            key, item = item
            out.append(orjson.dumps(key))
            out.append(b":")
        start(item)
    return b"".join(out)


def _key(key: Any, text_keys: bool) -> str:
    if isinstance(key, str):
        return key
    if not text_keys:
        raise JSONEncodeError(f"a mapping key is {type(key).__name__}, not text")
    if isinstance(key, int) and not isinstance(key, bool):
        return _int_text(key).decode()
    return orjson.loads(orjson.dumps({key: None}, option=orjson.OPT_NON_STR_KEYS)).popitem()[0]


def _scalar(item: Any, option: int) -> bytes:
    if isinstance(item, int) and not isinstance(item, bool) and not _I64_MIN <= item <= _U64_MAX:
        return _int_text(item)
    try:
        return orjson.dumps(item, option=option)
    except orjson.JSONEncodeError as exc:
        raise JSONEncodeError(str(exc)) from None


def _int_text(number: int) -> bytes:
    try:
        return str(int(number)).encode()
    except ValueError:  # past the interpreter's 4,300-digit limit for int -> text
        raise JSONEncodeError("an integer has too many digits (more than 4,300) to be written") from None
