"""Scrubbing secret values out of text, shared by every layer that writes what it was given.

Values at ``redact`` pointers are replaced where they stand (``engine/redact.py``); this module is
for the places where a secret may appear in text no pointer reaches: an error message, a
traceback, a model's reply, a string value the model or a tool built around it. A secret of at
least ``MIN_ANYWHERE`` characters is replaced wherever it occurs; a shorter one only where it
stands as a whole token (not next to a letter, a digit or ``_``), so that a one-letter password
never turns every matching letter of a record into a marker (which would rename keys, mangle
other values and, by the pattern of markers, reveal the secret itself).

Each secret is also looked for as messages may quote it: escaped as in a Python repr and as in
JSON (ASCII-only and not).
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from typing import Any, Iterable

REDACTED = "[REDACTED]"
#: secrets at least this long are scrubbed wherever they occur; shorter ones as whole tokens only
MIN_ANYWHERE = 4
#: credential schemes of an HTTP ``Authorization`` value (the part after the scheme is a secret too)
_SCHEME = re.compile(r"^\s*(?:Bearer|Basic|Token|Digest|Bot|ApiKey|Api-Key|Key|OAuth|Negotiate|DPoP)\s+(\S.*?)\s*$",
                     re.IGNORECASE)


def credential_parts(value: str) -> list[str]:
    """A credential as it may be quoted: the whole value and, for ``Bearer TOKEN`` and the like,
    the part after the scheme word (a server may echo just the token)."""
    out = [value]
    m = _SCHEME.match(value)
    if m and m.group(1) != value:
        out.append(m.group(1))
    return out


#: credentials this process holds that no variable names (``toolloop serve``'s people's tokens,
#: a token it made up): every run the process starts or resumes scrubs them too
_HELD: set[str] = set()


def hold_credentials(values: Iterable[str]) -> None:
    """Make ``values`` credentials of every run this process starts or resumes from now on."""
    _HELD.update(v for v in values if v)


def held_credentials() -> list[str]:
    return list(_HELD)


#: the live runs' secrets (anything with ``add(values)``, held weakly), told of each credential
#: learnt while they go (an MCP server's client-credential token): kept here, below every layer,
#: so a run registers without loading MCP's modules
_WATCHERS: "weakref.WeakSet[Any]" = weakref.WeakSet()
_WATCHING = threading.Lock()


def watch_credentials(secrets: Any) -> None:
    """``secrets`` is told (``secrets.add([value])``) of every credential learnt from now on."""
    with _WATCHING:
        _WATCHERS.add(secrets)


def tell_credentials(values: list[str]) -> None:
    """Credentials learnt now: every watcher alive is told of them."""
    with _WATCHING:
        watchers = list(_WATCHERS)
    for watcher in watchers:
        watcher.add(values)


def _forms(secret: str) -> set[str]:
    """A secret as messages may quote it: as is, escaped as a Python repr and as JSON."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return {f for f in forms if f}


class Scrubber:
    """Replaces known secret values in text (and in the strings of a JSON-like value)."""

    __slots__ = ("forms", "_pattern")

    def __init__(self, secrets: Iterable[Any]):
        forms: set[str] = set()
        for s in secrets:
            if isinstance(s, str) and s and s != REDACTED:
                forms |= _forms(s)
        self.forms = sorted(forms, key=lambda f: (-len(f), f))
        self._pattern: re.Pattern | None = None
        if self.forms:
            # longest first, so that overlapping secrets vanish whole
            parts = [re.escape(f) if len(f) >= MIN_ANYWHERE else rf"(?<!\w){re.escape(f)}(?!\w)" for f in self.forms]
            self._pattern = re.compile("|".join(parts))

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def finds(self, text: str, start: int = 0) -> bool:
        """Whether ``text`` holds a secret (as ``text()`` would replace it) that starts at or
        after ``start`` (the characters before it still count as its left context)."""
        return self._pattern is not None and self._pattern.search(text, start) is not None

    def deep(self, value: Any) -> Any:
        """A copy of ``value`` with every string scrubbed (a key only when it holds a secret)."""
        if self._pattern is None:
            return value
        return self._deep(value)

    def _deep(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self._deep(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._deep(v) for v in value]
        return value


def scrub(text: str, secrets: Iterable[Any]) -> str:
    """``text`` with every secret replaced (see ``Scrubber``)."""
    if not text:
        return text
    return Scrubber(secrets).text(text)
