"""The hash chain over a run's records (tamper evidence).

Every record of a run that the journal commits adds one link, in commit order:

    record_sha256 = SHA-256 of the record exactly as the journal stores it (UTF-8 JSON text)
    link_sha256   = SHA-256 of "<previous link_sha256>\\n<kind>\\n<ref>\\n<record_sha256>"

where the first link's previous link is the empty string, and ``kind`` and ``ref`` are:

- ``receipt`` (ref: its ``seq``), ``record`` (a decision, supervisor or guardrail record; ref: its
  number among the run's other records), ``model_answer`` (ref: its ``n``);
- ``approval`` (ref: the request's number in its run): an approval request, linked again each time
  it changes (answered, used, asked again); its text is the row's columns other than its keys'
  numbers, as canonical JSON (sorted keys, NULL columns left out);
- ``control`` (ref: its ``n``): an operator's steer or abort, linked again when a run reads it;
- ``went_past`` (ref: its number among the run's moved records): a model answer or receipt an
  earlier attempt of a routed run journaled past the point where a resumed run went another way,
  moved out of the run's tables as it was stored, so its ``record_sha256`` is the digest its own
  link carried.

A ``reset`` link (ref -1, record_sha256 of the empty string) says that the run's other records
were cleared to be recorded again (a resumed routed run replays its loop). The head is the last
link; the summary carries it as ``chain_sha256``. Approval answers and controls may be linked after
the summary while a run is paused (a person answers, an operator aborts): only such links may
follow the summary's head.

A record replaced later (a resumed run settles a call again, a request is answered) keeps its old
link: only the last link for each record is checked against what the journal holds now. A
``model_answer`` or ``receipt`` no longer in the run's tables must have been moved: a later
``went_past`` link carries its digest (and is checked against the moved copy like any record). ``verify``
recomputes the chain and names the first record that does not match; given a head kept elsewhere
(``expect``: a ``chain_sha256`` printed when the run, or an earlier session of it, ended), it also
checks that the chain still passes through it, which a journal rewritten with recomputed links
does not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

WENT_PAST = "went_past"
KINDS = ("receipt", "record", "model_answer", "approval", "control", WENT_PAST)
RESET = "reset"
#: kinds another process may link while the run is paused, after its summary
AFTER_SUMMARY = frozenset({"approval", "control"})
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
    #: the number of the link that is the head given with ``expect``
    expected_at: int | None = None


def describe(kind: str, ref: int, record: dict | None = None) -> str:
    """How a person finds the record: its type and keys."""
    def keys(*names: str) -> str:
        if record is None:
            return ""
        parts = [f"{k} {record[k]!r}" for k in names if record.get(k) not in (None, "")]
        return f" ({', '.join(parts)})" if parts else ""

    if kind == "receipt":
        return f"receipt seq {ref}{keys('item_key', 'call_key')}"
    if kind == "model_answer":
        return f"model answer {ref}"
    if kind == "approval":
        return f"approval request {ref}{keys('item_key', 'call_key')}"
    if kind == "control":
        return f"operator control {ref}{keys('kind')}"
    if kind == WENT_PAST:
        return f"went-past record {ref}"
    if kind == "record" and record is not None and isinstance(record.get("type"), str):
        it = record.get("iteration")
        return f"{record['type']} record {ref}" + (f" (iteration {it})" if it is not None else "")
    return f"{kind} {ref}"


def verify(links: Iterable[Link], current: dict[tuple[str, int], str], *,
           summary_head: str | None = None, parse: Callable[[str], dict | None] = lambda _t: None,
           expect: str | None = None) -> Verdict:
    """Recompute the chain from ``links`` (in order) and check it against the records the
    journal holds now (``current``: (kind, ref) -> stored text), the summary's head, and the head
    given as ``expect`` (a link the chain must pass through)."""
    links = list(links)
    last, last_reset = _last_links(links)
    moved = _moved(links)
    previous = ""
    for link in links:
        problem = _link_problem(link, previous, last, last_reset, current, parse, moved)
        if problem is not None:
            return Verdict(False, len(links), None, problem)
        previous = link.link_sha256
    problem = _unlinked_problem(current, last, last_reset, parse)
    if problem is not None:
        return Verdict(False, len(links), None, problem)
    head = previous or None
    at = {link.link_sha256: i for i, link in enumerate(links)}
    problem = _summary_problem(links, at, summary_head, head)
    if problem is not None:
        return Verdict(False, len(links), head, problem)
    if expect is not None:
        if expect not in at:
            return Verdict(False, len(links), head,
                           f"the head given with --expect, {expect[:12]}…, is not a link of the chain (whose head is"
                           f" {(head or 'none')[:12]}…): the journal was rewritten after that head was printed,"
                           " or it is another run's")
        return Verdict(True, len(links), head, expected_at=links[at[expect]].n)
    return Verdict(True, len(links), head)


def _last_links(links: list[Link]) -> tuple[dict[tuple[str, int], int], int]:
    """The number of the last link of each record, and of the last reset (-1: none)."""
    last: dict[tuple[str, int], int] = {}
    last_reset = -1
    for link in links:
        if link.kind == RESET:
            last_reset = link.n
        else:
            last[(link.kind, link.ref)] = link.n
    return last, last_reset


def _moved(links: list[Link]) -> dict[str, int]:
    """The digests the run's ``went_past`` links carry, each with the number of its last such link."""
    return {link.record_sha256: link.n for link in links if link.kind == WENT_PAST}


def _link_problem(link: Link, previous: str, last: dict[tuple[str, int], int], last_reset: int,
                  current: dict[tuple[str, int], str], parse: Callable[[str], dict | None],
                  moved: dict[str, int]) -> str | None:
    """What is wrong with one link: its kind, its digest, or (for the last link of a record
    not cleared by a later reset) the record the journal holds now."""
    if link.kind != RESET and link.kind not in KINDS:
        return f"link {link.n} has an unknown kind '{link.kind[:20]}'"
    if link_sha256(previous, link.kind, link.ref, link.record_sha256) != link.link_sha256:
        return f"link {link.n} ({describe(link.kind, link.ref)}) does not follow from the link before it"
    checked = (link.kind != RESET and last[(link.kind, link.ref)] == link.n
               and not (link.kind == "record" and link.n < last_reset))
    if not checked:
        return None
    text = current.get((link.kind, link.ref))
    if text is None and link.kind in ("model_answer", "receipt") and moved.get(link.record_sha256, -1) > link.n:
        return None  # moved out of the run's tables later: its went_past link checks the copy
    if text is None:
        return f"{describe(link.kind, link.ref)} is missing from the journal (link {link.n})"
    if record_sha256(text) != link.record_sha256:
        return f"{describe(link.kind, link.ref, parse(text))} does not match its link {link.n}"
    return None


def _unlinked_problem(current: dict[tuple[str, int], str], last: dict[tuple[str, int], int], last_reset: int,
                      parse: Callable[[str], dict | None]) -> str | None:
    """The first record the journal holds that no live link covers."""
    covered = {k for k, n in last.items() if not (k[0] == "record" and n < last_reset)}
    for key in sorted(set(current) - covered, key=lambda k: (KINDS.index(k[0]), k[1])):
        return f"{describe(key[0], key[1], parse(current[key]))} has no link in the chain"
    return None


def _summary_problem(links: list[Link], at: dict[str, int], summary_head: str | None,
                     head: str | None) -> str | None:
    """The summary's head must be a link followed only by links made while the run was paused."""
    if summary_head is None:
        return None
    i = at.get(summary_head)
    later = [link for link in links[i + 1:] if link.kind not in AFTER_SUMMARY] if i is not None else []
    if i is None or later:
        return (f"the summary's chain_sha256 {summary_head[:12]}… is not the chain's head"
                f" {(head or 'none')[:12]}…")
    return None


def verify_run(store: Any, run: dict, expect: str | None = None) -> Verdict | None:
    """The verdict on a journaled run's chain (``store`` is a ``Store``); None when the run has
    records but no chain at all (journaled by a toolloop without tamper evidence)."""
    links, current = store.chain_of(run["run_id"])
    if not links and current:
        return None
    summary = run.get("summary") if isinstance(run.get("summary"), dict) else None
    head = summary.get("chain_sha256") if summary is not None else None
    return verify(links, current, summary_head=head if isinstance(head, str) else None, parse=_parse, expect=expect)


def refuse_unless_it_holds(store: Any, run: dict, doing: str) -> None:
    """``resume`` and ``replay`` go on only with a run whose chain holds: a ``ConfigError``
    (exit 3) naming the first record that does not match, so an approval or a record edited in
    the database by hand is never acted on."""
    verdict = verify_run(store, run)
    if verdict is not None and verdict.ok:
        return
    from .contract.problems import Problem
    from .errors import ConfigError

    rid = run["run_id"]
    why = ("it was journaled by a toolloop without tamper evidence (no hash chain)" if verdict is None
           else f"the journal does not match its hash chain: {verdict.problem}")
    raise ConfigError([Problem("TL370", f"run {rid} cannot be {doing}: {why}", "<journal>",
                               hint=f"the journal was changed after it was written; see 'toolloop runs verify {rid}',"
                                    " and run the plan again as a new run")])


def _parse(text: str) -> dict | None:
    from . import _json

    try:
        value = _json.loads(text)
    except _json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
