"""Values from a user's files shown to a person: clipped to a short excerpt, control characters
escaped. Every finding, error message and table cell that quotes such a value goes through here,
so a registry that points at a private key or a megabyte of text never reaches the terminal
whole, and an escape sequence in an item key never reaches it raw.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

#: The most characters of one value a message quotes.
EXCERPT = 80

# C0 and C1 controls, DEL, line and paragraph separators, the marks that reorder text on screen
# (bidirectional overrides) and lone surrogates (not text at all)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape_one, text)


def excerpt(value: Any, limit: int = EXCERPT) -> str:
    """At most ``limit`` characters of ``value`` for a message: text as written, anything else in
    JSON form; control characters escaped; a clipped excerpt ends with '…'.

    The cost is bounded by ``limit``, however large or deeply nested the value is.
    """
    out: list[str] = []
    size = 0
    for piece in _pieces(value, limit + 1):
        piece = escape(piece)
        out.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(out)[: limit - 1] + "…"
    return "".join(out)


def quoted(value: Any) -> str:
    """``excerpt(value)`` in single quotes, as messages name a key, a tool or a value."""
    return f"'{excerpt(value)}'"


def listing(names: Any, most: int = 12) -> str:
    """Names for a hint ("known tools: a, b, c"): each an excerpt, at most ``most`` of them."""
    names = list(names)
    shown = ", ".join(excerpt(n, 40) for n in names[:most])
    return shown + (f", … ({len(names) - most} more)" if len(names) > most else "")


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1: "1 tool", "3 tools", "2 errors"."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def joined(parts: list[str]) -> str:
    """Parts as a sentence lists them: "a", "a and b", "a, b and c"."""
    if len(parts) < 2:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception raised by someone else's code, clipped; never fails,
    whatever the exception's ``__str__`` does."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an App's exception may break its own __str__
        message = ""
    return f"{name}: {clip(message)}" if message else name


def clip(message: str, limit: int = 2 * EXCERPT) -> str:
    """A message written by a library (a YAML parser, a schema validator) that may quote a value
    of its own accord: control characters escaped, clipped to ``limit`` characters."""
    return excerpt(message, limit)


def clip_quoting(message: str, *shown: str) -> str:
    """``clip(message)``, after each long rendering in ``shown`` (how the library wrote a value
    into its message) is cut to an excerpt where it occurs."""
    for text in shown:
        if len(text) > EXCERPT and text in message:
            message = message.replace(text, excerpt(text))
    return clip(message)


def _pieces(value: Any, cap: int) -> Iterator[str]:
    """The text of ``value`` in order, each piece at most ``cap`` characters (enough to know
    that an excerpt is clipped), walked without recursion."""
    if isinstance(value, str):
        yield value[:cap]
        return
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            yield item.text
        elif isinstance(item, str):
            yield _quoted(item, cap)
        elif isinstance(item, dict):
            parts: list[Any] = [_Raw("{")]
            for i, (key, sub) in enumerate(item.items()):
                if i:
                    parts.append(_Raw(", "))
                if i * 4 > cap:  # the rest cannot be shown anyway
                    parts.append(_Raw("…"))
                    break
                parts.extend((_Raw(_quoted(str(key), cap) + ": "), sub))
            parts.append(_Raw("}"))
            stack.extend(reversed(parts))
        elif isinstance(item, (list, tuple)):
            parts = [_Raw("[")]
            for i, sub in enumerate(item):
                if i:
                    parts.append(_Raw(", "))
                if i * 2 > cap:
                    parts.append(_Raw("…"))
                    break
                parts.append(sub)
            parts.append(_Raw("]"))
            stack.extend(reversed(parts))
        else:
            yield _scalar(item, cap)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _quoted(text: str, cap: int) -> str:
    import json

    return json.dumps(text[:cap], ensure_ascii=False)


def _scalar(item: Any, cap: int) -> str:
    if item is None:
        return "null"
    if item is True or item is False:
        return "true" if item else "false"
    if isinstance(item, int):
        if item.bit_length() > 4 * cap:  # writing it out would cost more than the excerpt shows
            return f"{'-' if item < 0 else ''}<an integer of about {int(item.bit_length() * 0.30103) + 1:,} digits>"
        return str(item)
    if isinstance(item, float):
        return repr(item)
    try:
        return repr(item)[:cap]
    except Exception:  # noqa: BLE001 - an App object whose repr fails is still named
        return f"<{type(item).__name__}>"
