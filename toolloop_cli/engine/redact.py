"""Redaction: values at redact pointers are replaced in everything written.

A pointer token ``*`` matches every array element and every object key. Only the values the
pointers reach are replaced: an object's keys and the values beside them are left as they are.
The secrets found there are also scrubbed, as whole values, from text that may quote them (error
messages, tracebacks, a model's reply; ``_secrets.Scrubber`` says how).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from .._secrets import REDACTED, Scrubber, scrub, watch_credentials

__all__ = ["REDACTED", "Redactor", "RunSecrets", "Scrubber", "scrub", "scrub_record"]


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

    def marked(self, value: Any) -> bool:
        """Does ``value`` hold the redaction marker where a pointer reaches (a redacted value the
        journal withheld)?"""
        if not self.active:
            return False
        found: list[str] = []
        for tokens in self.pointers:
            _collect(value, tokens, found)
        return REDACTED in found

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


class RunSecrets:
    """The secret values of one run that no pointer reaches, scrubbed from every record it writes:
    the credentials it read (model keys, MCP header values, client secrets and the tokens they
    yield, told as they come) and, in a routed run, the redacted values the model proposed (it
    may repeat them anywhere later). It only grows."""

    __slots__ = ("_values", "_scrubber", "__weakref__")

    def __init__(self, values: Iterable[Any] = ()):
        self._values: set[str] = set()
        self._scrubber: Scrubber | None = None
        self.add(values)
        watch_credentials(self)  # tokens an MCP server's client credentials yield while the run goes

    def add(self, values: Iterable[Any]) -> None:
        new = {v for v in values if isinstance(v, str) and v and v != REDACTED} - self._values
        if new:
            self._values = self._values | new  # a new set: another thread may be reading the old one
            self._scrubber = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def values(self) -> list[str]:
        return list(self._values)

    @property
    def scrubber(self) -> Scrubber:
        if self._scrubber is None:
            self._scrubber = Scrubber(self._values)
        return self._scrubber

    def text(self, text: str) -> str:
        return self.scrubber.text(text) if self._values else text

    def deep(self, value: Any) -> Any:
        return self.scrubber.deep(value) if self._values else value


#: fields of a record that toolloop itself writes (ids, times, hashes, counts): never scrubbed, so
#: a short secret that happens to match a digit group leaves them readable
_OWN_FIELDS = frozenset({
    "type", "run_id", "receipt_id", "parent_receipt_id", "parent_run_id", "child_run_id", "seq", "completion_seq",
    "started_at", "finished_at", "at", "duration_ms", "args_sha256", "contract_sha256", "chain_sha256",
    "request_sha256", "plan_sha256", "status", "attempts", "cache", "abandoned", "counts", "iteration", "n",
    "tokens", "input_tokens", "output_tokens", "loop", "approval", "parallel_batch_id", "mode", "executor",
})


#: values with no string in them: nothing to scrub
_SCALARS = frozenset({type(None), bool, int, float})


#: a receipt's fields that the call path shows scrubbed already (``call._shown``): with its own
#: fields, left as they are in the record of a receipt it scrubbed with the run's secrets
_SHOWN_SCRUBBED = _OWN_FIELDS | {"args", "result", "envelope"}


def scrub_record(rec: dict, secrets: Any, *, shown_scrubbed: bool = False) -> dict:
    """A record with ``secrets`` (``RunSecrets`` or a ``Scrubber``) scrubbed from every field
    that may hold what a tool, a model or a person wrote: one pass over the record, with the
    scrubber looked up once (a field's string scrubbed at once, a number or null left as it is).
    ``shown_scrubbed``: the record is of a receipt whose arguments, result and envelope the call
    path scrubbed of these very secrets as it built them; they are not walked a second time."""
    scrubber = secrets.scrubber if isinstance(secrets, RunSecrets) else secrets
    if not scrubber:
        return rec
    text, deep = scrubber.text, scrubber.deep
    skip = _SHOWN_SCRUBBED if shown_scrubbed else _OWN_FIELDS
    return {k: v if k in skip or type(v) in _SCALARS else text(v) if type(v) is str else deep(v)
            for k, v in rec.items()}


def without_run_secrets(secrets: RunSecrets | None, lanes: list[tuple], calls: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The journal rows of admitted lanes and calls (``spool.lane_rows``) with what a plan wrote
    literally withheld where it holds one of the run's secrets (a credential written as an
    argument or in a lane's payload): the arguments are stored as NULL and the payload as its
    hash only, as for a redacted value, so a resume rebuilds them from the plan (checked against
    the hash the row keeps). A scrubbed copy is not stored instead: a resume would call the tool
    with the marker."""
    if not secrets:
        return lanes, calls
    from .. import _json
    from .._canonical import sha256_of

    def holds(text: str | None) -> bool:
        return text is not None and secrets.text(text) != text

    calls = [(*c[:5], None, *c[6:]) if holds(c[5]) else c for c in calls]
    lanes = [(i, key, payload, sha256_of(payload)) if withheld is None and payload is not None
             and holds(_json.dumps_text(payload)) else (i, key, payload, withheld)
             for i, key, payload, withheld in lanes]
    return lanes, calls


#: variables whose values are credentials wherever toolloop runs (the web page's and the MCP
#: server's tokens): a run started by either never writes them
_CREDENTIAL_VARS = ("TOOLLOOP_SERVE_TOKEN", "TOOLLOOP_MCP_TOKEN")


def run_credentials(contract: Any, environ: Any) -> list[str]:
    """The credential values a run of ``contract`` reads: its MCP servers' header values (and the
    token inside each ``Bearer TOKEN``), toolloop's own tokens and those the process holds. Model
    keys are added by the routed runner, which knows its profiles."""
    from .._secrets import credential_parts, held_credentials

    decls = [t.mcp for s in contract.subagents.values() for t in s.tools.values() if t.mcp is not None]
    found: list[str] = []
    if decls:  # MCP's modules load only for a contract with a server
        from ..contract.mcp import secrets as header_secrets

        found = header_secrets(decls, environ)
    for var in _CREDENTIAL_VARS:
        if environ.get(var):
            found.extend(credential_parts(environ[var]))
    found.extend(held_credentials())
    return found


def without_proposed_secrets(text: str, tool_of: Callable[[str | None], Any], redactor_of: Callable[[Any], Any],
                             secrets: RunSecrets, decision: Any = None) -> str:
    """A router's answer as the journal keeps it: the values it proposes for a tool's redacted
    fields replaced where they stand, and added to the run's ``secrets`` (the model may repeat them).
    ``decision``: the answer already parsed (``parse_decision(text)``), if the caller has it."""
    from ..router.decisions import Decision, parse_decision  # routed runs only: kept out of other starts

    if decision is None:
        decision = parse_decision(text)
    if not isinstance(decision, Decision) or decision.action != "call" or decision.args is None:
        return text
    tool = tool_of(decision.tool)
    if tool is None:
        return text
    red = redactor_of(tool)
    proposed = red.secrets(decision.args)
    if not proposed:
        return text
    secrets.add(proposed)
    return json.dumps({"action": "call", "tool": decision.tool, "args": red.apply(decision.args),
                       "reason": decision.reason})
