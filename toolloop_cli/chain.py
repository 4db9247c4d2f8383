"""The hash chain over a run's records (tamper evidence).

Every record of a run that the journal commits (a receipt, a decision, a supervisor or guardrail
record, a model answer) adds one link, in commit order:

    record_sha256 = SHA-256 of the record exactly as the journal stores it (UTF-8 JSON text)
    link_sha256   = SHA-256 of "<previous link_sha256>\\n<kind>\\n<ref>\\n<record_sha256>"

where the first link's previous link is the empty string, ``kind`` is ``receipt`` (ref: its
``seq``), ``record`` (ref: its number among the run's other records) or ``model_answer`` (ref:
its ``n``). A ``reset`` link (ref -1, record_sha256 of the empty string) says that the run's other
records were cleared to be recorded again (a resumed routed run replays its loop). The head is the
last link; the summary carries it as ``chain_sha256``.

A record replaced later (a resumed run settles a call again) keeps its old link: only the last
link for each record is checked against what the journal holds now. ``verify`` recomputes the
chain and names the first record that does not match.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable

KINDS = ("receipt", "record", "model_answer")
RESET = "reset"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def record_sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def link_sha256(previous: str, kind: str, ref: int, record_digest: str) -> str:
    return hashlib.sha256(f"{previous}\n{kind}\n{ref}\n{record_digest}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Link:
    n: int
    kind: str
    ref: int
    record_sha256: str
    link_sha256: str


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    links: int
    head: str | None
    problem: str | None = None


def describe(kind: str, ref: int, record: dict | None = None) -> str:
    """How a person finds the record: its type and keys."""
    if kind == "receipt":
        keys = ""
        if record is not None:
            parts = [f"{k} {record[k]!r}" for k in ("item_key", "call_key") if record.get(k) is not None]
            keys = f" ({', '.join(parts)})" if parts else ""
        return f"receipt seq {ref}{keys}"
    if kind == "model_answer":
        return f"model answer {ref}"
    if kind == "record" and record is not None and isinstance(record.get("type"), str):
        it = record.get("iteration")
        return f"{record['type']} record {ref}" + (f" (iteration {it})" if it is not None else "")
    return f"{kind} {ref}"


def verify(links: Iterable[Link], current: dict[tuple[str, int], str], *,
           summary_head: str | None = None, parse: Callable[[str], dict | None] = lambda _t: None) -> Verdict:
    """Recompute the chain from ``links`` (in order) and check it against the records the
    journal holds now (``current``: (kind, ref) -> stored text)."""
    links = list(links)
    last: dict[tuple[str, int], int] = {}
    last_reset = -1
    for link in links:
        if link.kind == RESET:
            last_reset = link.n
        else:
            last[(link.kind, link.ref)] = link.n
    previous = ""
    for link in links:
        if link.kind != RESET and link.kind not in KINDS:
            return Verdict(False, len(links), None, f"link {link.n} has an unknown kind '{link.kind[:20]}'")
        expected = link_sha256(previous, link.kind, link.ref, link.record_sha256)
        if expected != link.link_sha256:
            return Verdict(False, len(links), None,
                           f"link {link.n} ({describe(link.kind, link.ref)}) does not follow from the link before it")
        checked = (link.kind != RESET and last[(link.kind, link.ref)] == link.n
                   and not (link.kind == "record" and link.n < last_reset))
        if checked:
            text = current.get((link.kind, link.ref))
            if text is None:
                return Verdict(False, len(links), None,
                               f"{describe(link.kind, link.ref)} is missing from the journal (link {link.n})")
            if record_sha256(text) != link.record_sha256:
                return Verdict(False, len(links), None,
                               f"{describe(link.kind, link.ref, parse(text))} does not match its link {link.n}")
        previous = link.link_sha256
    covered = {k for k, n in last.items() if not (k[0] == "record" and n < last_reset)}
    for key in sorted(set(current) - covered, key=lambda k: (KINDS.index(k[0]), k[1])):
        return Verdict(False, len(links), None,
                       f"{describe(key[0], key[1], parse(current[key]))} has no link in the chain")
    head = previous or None
    if summary_head is not None and summary_head != head:
        return Verdict(False, len(links), head,
                       f"the summary's chain_sha256 {summary_head[:12]}… is not the chain's head"
                       f" {(head or 'none')[:12]}…")
    return Verdict(True, len(links), head)
