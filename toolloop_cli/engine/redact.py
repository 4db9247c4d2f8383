"""Redaction (SPEC 5.9): values at redact pointers are replaced in everything written.

A pointer token ``*`` matches every array element and every object key. The secrets found in a
call's arguments are also scrubbed from error messages and tracebacks, which may quote them.
"""

from __future__ import annotations

from typing import Any, Iterable

REDACTED = "[REDACTED]"


def _tokens(pointer: str) -> tuple[str, ...]:
    if pointer == "":
        return ()
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


class Redactor:
    """Applies a tool's redact pointers; cheap when there are none."""

    __slots__ = ("pointers", "active")

    def __init__(self, pointers: Iterable[str]):
        self.pointers = tuple(_tokens(p) for p in pointers)
        self.active = bool(self.pointers)

    def apply(self, value: Any) -> Any:
        """A copy of ``value`` with every pointed-at value replaced by ``[REDACTED]``."""
        if not self.active:
            return value
        for tokens in self.pointers:
            value = _replace(value, tokens)
        return value

    def apply_envelope(self, envelope: dict) -> dict:
        """An envelope reading with redacted result fields hidden (handoff and diagnosis fields
        carry result values under their own names)."""
        out = dict(envelope)
        if out.get("handoff"):
            out["handoff"] = self.apply(out["handoff"])
        diag = out.get("diagnosis")
        if diag and diag.get("fields"):
            out["diagnosis"] = {**diag, "fields": self.apply(diag["fields"])}
        return out

    def secrets(self, value: Any) -> list[str]:
        """The text forms of the values the pointers reach (for scrubbing messages)."""
        if not self.active:
            return []
        found: list[str] = []
        for tokens in self.pointers:
            _collect(value, tokens, found)
        return [s for s in found if s]


def _replace(value: Any, tokens: tuple[str, ...]) -> Any:
    if not tokens:
        return REDACTED
    head, rest = tokens[0], tokens[1:]
    if isinstance(value, dict):
        if head == "*":
            return {k: _replace(v, rest) for k, v in value.items()}
        if head in value:
            out = dict(value)
            out[head] = _replace(value[head], rest)
            return out
        return value
    if isinstance(value, list):
        if head == "*":
            return [_replace(v, rest) for v in value]
        if head.isdigit() and int(head) < len(value):
            out = list(value)
            out[int(head)] = _replace(value[int(head)], rest)
            return out
    return value


def _collect(value: Any, tokens: tuple[str, ...], found: list[str]) -> None:
    if not tokens:
        _leaves(value, found)
        return
    head, rest = tokens[0], tokens[1:]
    if isinstance(value, dict):
        items = value.values() if head == "*" else ([value[head]] if head in value else [])
    elif isinstance(value, list):
        if head == "*":
            items = value
        elif head.isdigit() and int(head) < len(value):
            items = [value[int(head)]]
        else:
            items = []
    else:
        items = []
    for v in items:
        _collect(v, rest, found)


def _leaves(value: Any, found: list[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _leaves(v, found)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, found)
    elif isinstance(value, str):
        found.append(value)
    elif value is not None and not isinstance(value, bool):
        found.append(str(value))


def _forms(secret: str) -> set[str]:
    """A secret as messages may quote it: as is, escaped as a Python repr and as JSON."""
    import json

    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return {f for f in forms if f}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced; longest first so overlapping secrets vanish whole."""
    if not text:
        return text
    return Scrubber(secrets).text(text)


class Scrubber:
    """Replaces known secret values wherever they appear as text, in every spelling."""

    __slots__ = ("forms",)

    def __init__(self, secrets: Iterable[str]):
        forms: set[str] = set()
        for s in secrets:
            if s:
                forms |= _forms(s)
        self.forms = sorted(forms, key=len, reverse=True)

    def text(self, text: str) -> str:
        for s in self.forms:
            if s in text:
                text = text.replace(s, REDACTED)
        return text

    def deep(self, value: Any) -> Any:
        """A copy of ``value`` with every string scrubbed (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.deep(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.deep(v) for v in value]
        return value
